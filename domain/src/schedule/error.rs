//! Where a calendar schedule went wrong, as a column and a reason.

/// A problem at a byte offset of the schedule's literal: the parser's half of
/// [`super::ScheduleError::Invalid`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The byte offset of the literal where the problem starts (0 is the first byte).
    pub column: usize,
    /// What is wrong there, and what is expected.
    pub reason: String,
}

impl Problem {
    /// A problem at `column`.
    pub fn at(column: usize, reason: String) -> Problem {
        Problem { column, reason }
    }
}
