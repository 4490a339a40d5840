//! What `GET /api/v1/clocks` reads: filters, pages in id order, and selections that keep the
//! clocks they were taken with.

use super::*;

#[test]
fn list_applies_the_filter_in_id_order() -> Result<(), Box<dyn std::error::Error>> {
    let pending = Clock {
        id: id("c0"),
        name: "orders".into(),
        schedule: schedule("every.5.seconds"),
        status: ClockStatus::Pending,
        channel: Channel::Http {
            queue_id: QueueId::new("q0".to_owned()),
        },
        overlap: crate::Overlap::Allow,
    };
    let mut registry = Registry::try_from(RegistrySnapshot {
        clocks: vec![pending],
        ledger: LedgerSnapshot::default(),
    })?;
    create(&mut registry, "orders", "every.1.minute", "c3");
    create(&mut registry, "orders", "every.1.hour", "c1");
    create(&mut registry, "invoices", "every.5.seconds", "c2");
    registry.apply(Command::Pause {
        id: id("c1"),
        now_ms: 0,
        request: None,
    });

    /// Query pairs, and the ids they should list.
    type Case = (
        &'static [(&'static str, &'static str)],
        &'static [&'static str],
    );
    let cases: &[Case] = &[
        (&[], &["c1", "c2", "c3"]),
        (&[("access_token", "t")], &["c1", "c2", "c3"]),
        (&[("name", "orders")], &["c1", "c3"]),
        (&[("name", "!orders")], &["c2"]),
        (&[("schedule", "!every.5.seconds")], &["c1", "c3"]),
        (&[("status", "PENDING")], &["c0"]),
        (&[("status", "!PAUSED")], &["c0", "c2", "c3"]),
        (&[("status", "!ACTIVE"), ("name", "orders")], &["c0", "c1"]),
        (&[("id", "c0")], &[]),
    ];
    for (query, expected) in cases {
        let filter = ClockFilter::from_pairs(
            query
                .iter()
                .map(|(key, value)| ((*key).to_owned(), (*value).to_owned())),
        )?;
        let listed: Vec<String> = registry
            .select(filter)
            .matching(None)
            .map(|clock| clock.id.to_string())
            .collect();
        assert_eq!(listed, *expected, "query {query:?}");
    }
    Ok(())
}

#[test]
fn pages_follow_the_id_order_from_after_the_last_id_seen() {
    let mut registry = Registry::new();
    for n in 0..5 {
        create(&mut registry, &format!("n{n}"), "@never", &format!("c{n}"));
    }
    let every = ClockFilter::default();
    let ids =
        |page: &[Clock]| -> Vec<String> { page.iter().map(|clock| clock.id.to_string()).collect() };
    let every = registry.select(every);
    let (first, more) = every.page(None, 2);
    assert_eq!((ids(&first), more), (vec!["c0".into(), "c1".into()], true));
    let (next, more) = every.page(Some(&id("c1")), 2);
    assert_eq!((ids(&next), more), (vec!["c2".into(), "c3".into()], true));
    let (last, more) = every.page(Some(&id("c3")), 2);
    assert_eq!((ids(&last), more), (vec!["c4".into()], false));
    // `after` need not name a clock (it may have been purged since).
    let (from_gone, _) = every.page(Some(&id("c10")), 10);
    assert_eq!(ids(&from_gone), ["c2", "c3", "c4"]);
    let named = ClockFilter::from_pairs([("name".to_string(), "n3".to_string())])
        .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(registry.select(named).page(None, 1).0.len(), 1);
    assert_eq!(every.matching(None).count(), 5);
}

#[test]
fn a_selection_keeps_the_clocks_it_was_taken_with() {
    let mut registry = Registry::new();
    create(&mut registry, "kept", "@never", "c1");
    create(&mut registry, "gone", "@never", "c2");
    let every = registry.select(ClockFilter::default());
    let named = ClockFilter::from_pairs([("name".to_string(), "kept".to_string())])
        .unwrap_or_else(|error| panic!("{error}"));
    let kept = registry.select(named);
    create(&mut registry, "kept", "every.1.seconds", "c3");
    registry.apply(Command::Purge {
        clocks: vec![id("c2")],
    });
    registry.apply(Command::Pause {
        id: id("c1"),
        now_ms: 0,
        request: None,
    });
    let ids = |selection: &Selection| -> Vec<String> {
        selection
            .matching(None)
            .map(|clock| format!("{} {:?}", clock.id, clock.status))
            .collect()
    };
    assert_eq!(ids(&every), ["c1 Active", "c2 Active"]);
    assert_eq!(ids(&kept), ["c1 Active"]);
}

#[test]
fn a_list_by_name_answers_what_a_pass_over_every_clock_answers() {
    let mut registry = Registry::new();
    // Ids out of name order, several schedules per name, a paused clock.
    let clocks = [
        ("orders", "@never", "c7"),
        ("orders", "every.1.seconds", "c2"),
        ("orders", "every.2.seconds", "c5"),
        ("invoices", "@never", "c3"),
        ("order", "@never", "c1"),
    ];
    for (name, literal, clock) in clocks {
        create(&mut registry, name, literal, clock);
    }
    registry.apply(Command::Pause {
        id: id("c5"),
        now_ms: 0,
        request: None,
    });
    let scan = |filter: &ClockFilter, after: Option<&ClockId>| -> Vec<String> {
        registry
            .clocks()
            .filter(|clock| after.is_none_or(|after| clock.id > *after))
            .filter(|clock| filter.matches(clock))
            .map(|clock| clock.id.to_string())
            .collect()
    };
    let filter = |pairs: &[(&str, &str)]| {
        ClockFilter::from_pairs(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())))
            .unwrap_or_else(|error| panic!("{error}"))
    };
    for pairs in [
        vec![("name", "orders")],
        vec![("name", "orders"), ("status", "ACTIVE")],
        vec![("name", "orders"), ("schedule", "@never")],
        vec![("name", "order")],
        vec![("name", "receipts")],
        vec![("name", "!orders")],
    ] {
        let filter = filter(&pairs);
        for after in [None, Some(id("c2")), Some(id("c6"))] {
            let listed: Vec<String> = registry
                .select(filter.clone())
                .matching(after.as_ref())
                .map(|clock| clock.id.to_string())
                .collect();
            assert_eq!(
                listed,
                scan(&filter, after.as_ref()),
                "{pairs:?} after {after:?}"
            );
        }
    }
    let (page, more) = registry.select(filter(&[("name", "orders")])).page(None, 2);
    let ids: Vec<String> = page.iter().map(|clock| clock.id.to_string()).collect();
    assert_eq!(
        (ids, more),
        (vec!["c2".to_string(), "c5".to_string()], true)
    );
}
