//! The list query of `GET /api/v1/clocks` (SPEC §2): which clocks a person
//! asked to see.
//!
//! The query is parsed once, here, into a [`ClockFilter`] that the registry
//! applies, so that every node answers the same query the same way and the
//! API layer only maps [`FilterError`] to a 400.

use crate::clock::{Clock, ClockStatus, StatusError};
use crate::excerpt::Excerpt;

/// The query parameter that carries the access token (SPEC §4). It shares the
/// query string with the filters but is never one.
const ACCESS_TOKEN_KEY: &str = "access_token";

/// One condition on one field: the field equals `value` (byte for byte), or,
/// when `negated`, differs from it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Criterion {
    /// The literal to compare with; for `status`, a status word.
    pub value: String,
    /// Whether the condition is inverted (the raw value started with `!`).
    pub negated: bool,
}

impl Criterion {
    /// Reads a raw query value: one leading `!` negates and is removed, the
    /// rest is the literal (`!!x` means "not equal to `!x`"; `!` alone means
    /// "not empty", which every clock satisfies).
    pub fn parse(raw: &str) -> Criterion {
        match raw.strip_prefix('!') {
            Some(value) => Criterion {
                value: value.to_owned(),
                negated: true,
            },
            None => Criterion {
                value: raw.to_owned(),
                negated: false,
            },
        }
    }

    /// Whether `actual` satisfies the condition.
    pub fn accepts(&self, actual: &str) -> bool {
        (actual == self.value) != self.negated
    }
}

/// The conditions of a list query, combined with AND; an absent field accepts
/// every clock.
///
/// Compatibility rule (Ticktok): without a `status` criterion, PENDING clocks
/// are left out.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClockFilter {
    /// Condition on the clock's name.
    pub name: Option<Criterion>,
    /// Condition on the schedule literal (not its interval:
    /// `every.60.seconds` does not match `every.1.minute`).
    pub schedule: Option<Criterion>,
    /// Condition on the status word; always a known status.
    pub status: Option<Criterion>,
    /// Condition on the clock id.
    pub id: Option<Criterion>,
}

/// Why a list query was refused; the API answers it with a 400.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FilterError {
    /// A query parameter that is neither a filter nor the access token; it is
    /// refused rather than ignored so that a typo does not silently widen the
    /// list.
    #[error("unknown filter key {key}: supported keys are name, schedule, status, id")]
    UnknownKey {
        /// The offending key.
        key: Excerpt,
    },
    /// A `status` value (after any `!`) that is not a status word.
    #[error("invalid status filter: {source}")]
    Status {
        /// What was wrong with the value.
        #[from]
        source: StatusError,
    },
}

impl ClockFilter {
    /// Builds a filter from decoded query pairs. `access_token` is skipped;
    /// when a key is repeated, the last value wins (as with a plain
    /// key-to-value map of the query).
    pub fn from_pairs<I>(pairs: I) -> Result<ClockFilter, FilterError>
    where
        I: IntoIterator<Item = (String, String)>,
    {
        let mut filter = ClockFilter::default();
        for (key, raw) in pairs {
            let criterion = Criterion::parse(&raw);
            let slot = match key.as_str() {
                "name" => &mut filter.name,
                "schedule" => &mut filter.schedule,
                "id" => &mut filter.id,
                "status" => {
                    criterion.value.parse::<ClockStatus>()?;
                    &mut filter.status
                }
                ACCESS_TOKEN_KEY => continue,
                _ => {
                    return Err(FilterError::UnknownKey {
                        key: Excerpt::of(&key),
                    });
                }
            };
            *slot = Some(criterion);
        }
        Ok(filter)
    }

    /// Whether `clock` satisfies every criterion (and, with no status
    /// criterion, is not PENDING).
    pub fn matches(&self, clock: &Clock) -> bool {
        let accepts = |criterion: &Option<Criterion>, actual: &str| {
            criterion
                .as_ref()
                .is_none_or(|criterion| criterion.accepts(actual))
        };
        let status_ok = match &self.status {
            Some(criterion) => criterion.accepts(clock.status.as_str()),
            None => clock.status != ClockStatus::Pending,
        };
        status_ok
            && accepts(&self.name, &clock.name)
            && accepts(&self.schedule, clock.schedule.as_str())
            && accepts(&self.id, &clock.id.text())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Channel, ClockId, QueueId};
    use crate::schedule::Schedule;

    fn clock(id: &str, name: &str, schedule: &str, status: ClockStatus) -> Clock {
        Clock {
            id: ClockId::new(id.to_owned()),
            name: name.into(),
            schedule: Schedule::parse(schedule)
                .unwrap_or_else(|err| panic!("test schedule {schedule:?}: {err}")),
            status,
            channel: Channel::Http {
                queue_id: QueueId::new(format!("q-{id}")),
            },
            overlap: crate::Overlap::Allow,
        }
    }

    fn clocks() -> Vec<Clock> {
        vec![
            clock("a", "alpha", "every.5.seconds", ClockStatus::Active),
            clock("b", "beta", "every.5.seconds", ClockStatus::Paused),
            clock("c", "alpha", "every.1.minute", ClockStatus::Active),
            clock("d", "alpha", "every.5.seconds", ClockStatus::Pending),
            clock("e", "!bang", "@never", ClockStatus::Active),
        ]
    }

    fn filter(query: &[(&str, &str)]) -> Result<ClockFilter, FilterError> {
        ClockFilter::from_pairs(
            query
                .iter()
                .map(|(key, value)| ((*key).to_owned(), (*value).to_owned())),
        )
    }

    #[test]
    fn selects_clocks_with_and_negation_and_the_pending_rule() {
        let cases: &[(&[(&str, &str)], &str)] = &[
            (&[], "abce"),
            (&[("access_token", "secret")], "abce"),
            (&[("name", "alpha")], "ac"),
            (&[("name", "!alpha")], "be"),
            (&[("name", "!bang")], "abce"),
            (&[("name", "!!bang")], "abc"),
            (&[("name", "!!!bang")], "abce"),
            (&[("schedule", "every.5.seconds")], "ab"),
            (&[("schedule", "!every.5.seconds")], "ce"),
            (&[("schedule", "every.60.seconds")], ""),
            (&[("name", "alpha"), ("schedule", "every.5.seconds")], "a"),
            (&[("status", "ACTIVE")], "ace"),
            (&[("status", "!ACTIVE")], "bd"),
            (&[("status", "PENDING")], "d"),
            (&[("status", "!PAUSED")], "acde"),
            (&[("status", "PENDING"), ("name", "alpha")], "d"),
            (&[("id", "b")], "b"),
            (&[("id", "d")], ""),
            (&[("id", "!a")], "bce"),
            (&[("name", "")], ""),
            (&[("name", "!")], "abce"),
            (&[("name", "beta"), ("name", "alpha")], "ac"),
        ];
        let all = clocks();
        for (query, expected) in cases {
            let filter = filter(query).unwrap_or_else(|err| panic!("{query:?}: {err}"));
            let selected: String = all
                .iter()
                .filter(|clock| filter.matches(clock))
                .map(|clock| clock.id.to_string())
                .collect();
            assert_eq!(&selected, expected, "query {query:?}");
        }
    }

    #[test]
    fn refuses_unknown_keys_and_statuses() {
        let cases: &[(&[(&str, &str)], &str)] = &[
            (
                &[("nmae", "alpha")],
                "unknown filter key \"nmae\": supported keys are name, schedule, status, id",
            ),
            (
                &[("name", "alpha"), ("Status", "ACTIVE")],
                "unknown filter key \"Status\": supported keys are name, schedule, status, id",
            ),
            (
                &[("status", "active")],
                "invalid status filter: unknown clock status \"active\": expected one of \
                 PENDING, ACTIVE, PAUSED",
            ),
            (
                &[("status", "!STOPPED")],
                "invalid status filter: unknown clock status \"STOPPED\": expected one of \
                 PENDING, ACTIVE, PAUSED",
            ),
            (
                &[("status", "")],
                "invalid status filter: unknown clock status \"\": expected one of \
                 PENDING, ACTIVE, PAUSED",
            ),
        ];
        for (query, message) in cases {
            let err = filter(query).err().map(|err| err.to_string());
            assert_eq!(err.as_deref(), Some(*message), "query {query:?}");
        }
    }

    #[test]
    fn criteria_strip_one_leading_bang() {
        let cases = [
            ("x", "x", false),
            ("!x", "x", true),
            ("!!x", "!x", true),
            ("", "", false),
            ("!", "", true),
            ("x!", "x!", false),
        ];
        for (raw, value, negated) in cases {
            let expected = Criterion {
                value: value.to_owned(),
                negated,
            };
            assert_eq!(Criterion::parse(raw), expected, "raw {raw:?}");
        }
    }
}
