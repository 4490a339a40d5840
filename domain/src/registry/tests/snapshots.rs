//! The registry's serialized forms: snapshot round trips and refused corrupt snapshots, the
//! ledger in a snapshot, images that keep the state they were taken at, and the clocks stamp.

use super::*;

#[test]
fn a_snapshot_round_trip_rebuilds_the_index() -> Result<(), serde_json::Error> {
    let mut registry = Registry::new();
    create(&mut registry, "orders", "every.5.seconds", "c2");
    create(&mut registry, "invoices", "@never", "c1");
    registry.apply(Command::Pause {
        id: id("c1"),
        now_ms: 0,
        request: None,
    });

    let snapshot = serde_json::to_value(&registry)?;
    let ids: Vec<&str> = snapshot["clocks"]
        .as_array()
        .map(|clocks| {
            clocks
                .iter()
                .filter_map(|clock| clock["id"].as_str())
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(ids, ["c1", "c2"]);
    let owned_form = serde_json::to_value(RegistrySnapshot::from(registry.clone()))?;
    assert_eq!(
        snapshot, owned_form,
        "serialized in place as its snapshot form"
    );

    let mut restored: Registry = serde_json::from_value(snapshot)?;
    assert_eq!(restored, registry);
    let found = restored
        .find("invoices", &schedule("@never"))
        .map(|clock| clock.status);
    assert_eq!(found, Some(ClockStatus::Paused));
    let joined = restored.apply(register("orders", "every.5.seconds", "c3", NO_LIMIT));
    assert!(matches!(joined, Outcome::Registered { created: false, .. }));
    assert_eq!(restored.len(), 2);
    Ok(())
}

#[test]
fn corrupt_snapshots_are_refused() -> Result<(), serde_json::Error> {
    let clock = |id: &str, name: &str| {
        serde_json::json!({
            "id": id, "name": name, "schedule": "every.1.second", "status": "ACTIVE",
            "channel": {"type": "http", "queue_id": format!("q-{id}")},
        })
    };
    let cases = [
        (
            serde_json::json!({"clocks": [clock("c1", "a"), clock("c1", "b")], "ledger": {}}),
            "corrupt registry snapshot: clock id c1 appears twice",
        ),
        (
            serde_json::json!({"clocks": [clock("c1", "a"), clock("c2", "a")], "ledger": {}}),
            "corrupt registry snapshot: clocks c1 and c2 both have name \"a\" and schedule \
             every.1.second",
        ),
    ];
    for (snapshot, message) in cases {
        let err = serde_json::from_value::<Registry>(snapshot).err();
        assert_eq!(err.map(|err| err.to_string()).as_deref(), Some(message));
    }
    let empty: Registry = serde_json::from_str(r#"{"clocks": [], "ledger": {}}"#)?;
    assert!(empty.is_empty());
    Ok(())
}

#[test]
fn a_snapshot_keeps_the_ledger() -> Result<(), serde_json::Error> {
    let mut registry = Registry::new();
    registry.apply(rabbit("a", "every.1.seconds", "ra", 0));
    create(&mut registry, "h", "every.1.seconds", "hc");
    registry.apply(intent(3_000, 2_500));
    registry.apply(Command::Tick {
        id: id("ra"),
        now_ms: 2_600,
        request: None,
    });
    let restored: Registry = serde_json::from_str(&serde_json::to_string(&registry)?)?;
    assert_eq!(restored, registry);
    assert_eq!(
        outbox_ids(&restored),
        ["ra-1000", "ra-2000", "ra-m0", "ra-3000"]
    );
    Ok(())
}

#[test]
fn the_clocks_stamp_moves_when_a_clock_is_added_paused_resumed_or_purged_and_only_then() {
    let mut registry = Registry::new();
    let mut last = registry.clocks_stamp();
    let mut moved = |registry: &Registry, what: &str, expected: bool| {
        let now = registry.clocks_stamp();
        assert_eq!(now != last, expected, "{what}: did the stamp move?");
        last = now;
    };
    let clock = create(&mut registry, "orders", "every.1.seconds", "c1");
    moved(&registry, "a registration", true);
    registry.apply(register("orders", "every.1.seconds", "c2", NO_LIMIT));
    moved(&registry, "a registration that joins the clock", false);
    registry.apply(intent(10_000, 0));
    let Channel::Http { queue_id } = clock.channel.clone() else {
        panic!("the tests register http clocks");
    };
    registry.apply(Command::Pop {
        queue: queue_id.clone(),
        now_ms: 5_000,
        request: "r1".into(),
    });
    registry.apply(Command::Touch {
        queues: vec![queue_id],
        now_ms: 6_000,
    });
    moved(&registry, "an intent, a pop and a touch", false);
    registry.apply(Command::Pause {
        id: id("c1"),
        now_ms: 7_000,
        request: None,
    });
    moved(&registry, "a pause", true);
    registry.apply(Command::Resume {
        id: id("c1"),
        now_ms: 8_000,
        request: None,
    });
    moved(&registry, "a resume", true);
    let copy = registry.clone();
    assert_eq!(copy.clocks_stamp(), registry.clocks_stamp(), "a copy");
    registry.apply(Command::Purge {
        clocks: vec![id("c1")],
    });
    moved(&registry, "a purge", true);
    registry.apply(restore(copy.clone().into(), 9_000));
    moved(&registry, "a restore", true);

    // A registry loaded from its serialized form holds the same state, under a stamp of
    // its own.
    let json = serde_json::to_string(&copy).expect("a registry serializes");
    let loaded: Registry = serde_json::from_str(&json).expect("and loads");
    assert_eq!(loaded, copy, "equal state");
    assert_ne!(loaded.clocks_stamp(), copy.clocks_stamp());
}

#[test]
fn an_image_keeps_the_state_it_was_taken_at_while_the_registry_goes_on() {
    let mut registry = backed_up();
    registry.apply(Command::Resume {
        id: id("hc"),
        now_ms: 2_600,
        request: None,
    });
    registry.apply(intent(4_000, 3_500));
    let then = serde_json::to_value(&registry).unwrap_or_default();
    let image = registry.image();
    assert!(
        image.clocks.ptr_eq(&registry.clocks)
            && image.ledger.outbox.ptr_eq(&registry.ledger.outbox),
        "an image shares the registry's maps: taking one copies nothing"
    );

    // Every kind of change after the image: it must see none of them.
    create(&mut registry, "later", "every.2.seconds", "lc");
    registry.apply(intent(9_000, 8_500));
    registry.apply(Command::Pop {
        queue: queue_for("hc"),
        now_ms: 9_000,
        request: "after-image".into(),
    });
    registry.apply(Command::Pause {
        id: id("ra"),
        now_ms: 9_100,
        request: None,
    });
    registry.apply(Command::Purge {
        clocks: vec![id("hc")],
    });

    let now = serde_json::to_value(&registry).unwrap_or_default();
    assert_ne!(now, then, "the registry changed");
    // Readers that pass over every clock (a scrape, the dashboard) see the image's clocks.
    let seen: Vec<String> = image.clocks().map(|clock| clock.id.to_string()).collect();
    assert_eq!(seen, ["hc", "ra"], "the image's clocks, by id");
    assert_eq!(serde_json::to_value(&image).unwrap_or_default(), then);
    let loaded: Registry = serde_json::from_value(then).unwrap_or_default();
    assert_eq!(
        loaded.len(),
        2,
        "the image loads as the registry it was taken from"
    );
}
