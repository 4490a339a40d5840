//! Plain-text tables for people: left-aligned columns separated by two spaces, a header row in
//! capitals, no borders (the style of `kubectl get` and `consul members`).

/// Renders `rows` under `headers`, each column as wide as its widest cell.
pub fn render(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers
        .iter()
        .map(|header| header.chars().count())
        .collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let header: Vec<String> = headers.iter().map(|header| header.to_string()).collect();
    std::iter::once(&header)
        .chain(rows)
        .map(|row| line(&widths, row))
        .collect::<Vec<_>>()
        .join("\n")
}

fn line(widths: &[usize], row: &[String]) -> String {
    let cells: Vec<String> = widths
        .iter()
        .zip(row)
        .map(|(width, cell)| format!("{cell:<width$}"))
        .collect();
    cells.join("  ").trim_end().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_as_wide_as_their_widest_cell() {
        let rows = vec![
            vec!["1".to_string(), "leader".to_string()],
            vec!["12".to_string(), "follower".to_string()],
        ];
        assert_eq!(
            render(&["ID", "ROLE"], &rows),
            "ID  ROLE\n1   leader\n12  follower"
        );
    }
}
