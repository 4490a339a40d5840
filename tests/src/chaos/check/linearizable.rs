//! Linearizability of the clock registry (SPEC §2: "reads are linearizable"; §7: one clock per
//! pair, durable acknowledged writes).
//!
//! The history is split per clock name: each name is an independent object (one clock at
//! most, since the workload uses one schedule and nothing is purged), and linearizability is
//! compositional, so the whole history is linearizable exactly when every object's is. Each
//! object is checked with the Wing–Gong search with memoization that Knossos and porcupine
//! use: a depth-first search for a total order of the operations that respects real time (an
//! operation that ended before another started comes first) and that a sequential model of
//! the object accepts, remembering every (set of linearized operations, model state) pair it
//! already explored.
//!
//! The sequential model of one name: no clock, or one clock `(id, status)`.
//!
//! | operation | no clock | clock `(id, s)` |
//! |---|---|---|
//! | register | creates `(returned id, ACTIVE)`; the response shows `PENDING` | unchanged; returns `(id, s)` |
//! | pause `id` | 404 | status `PAUSED`; returns `PAUSED` |
//! | resume `id` | 404 | status `ACTIVE`; returns `ACTIVE` |
//! | get `id` | 404 | returns `s` |
//! | list by name | `[]` | `[(id, s)]` |
//!
//! An indeterminate operation may take effect at any moment after its start, or never; its
//! response says nothing. It is modelled as an operation that ends at +∞ and may be left out
//! of the order. An indeterminate read changes nothing and is dropped. When an indeterminate
//! registration creates the clock, the model does not know the id; the first operation that
//! shows one fixes it (there is only one clock per name, so any id that a registration of the
//! name returned is that clock's).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use super::describe;
use crate::chaos::history::{Event, Op, OpResult, Violation};

/// The name this checker reports under.
pub const CHECKER: &str = "linearizable";

/// How many search steps [`check`] spends on one clock name before it gives up and reports
/// "search limit reached": a bound on the time a pathological history can take, far above
/// what the workload's histories (< 60 operations per name, ~4 concurrent) need.
pub const SEARCH_LIMIT: u64 = 2_000_000;

/// Checks that the operations of `events` are linearizable, one clock name at a time, with
/// the default [`SEARCH_LIMIT`].
///
/// Pause, resume and get are attributed to the name whose registration returned their id; an
/// operation on an id that no registration returned belongs to no object and is skipped.
/// Returns one violation per name whose operations admit no linearization (with the name, the
/// longest valid order found and every operation of the name in start order), one per name
/// whose search hit the limit, and one per id that registrations of two names returned.
pub fn check(events: &[Event]) -> Vec<Violation> {
    check_with_limit(events, SEARCH_LIMIT)
}

/// [`check`] with an explicit bound on the search steps spent per clock name.
///
/// Exists so that a test can show the limit is reported rather than waited out.
pub fn check_with_limit(events: &[Event], limit: u64) -> Vec<Violation> {
    let mut violations = Vec::new();
    let mut in_order: Vec<&Event> = events.iter().collect();
    in_order.sort_by_key(|event| (event.start_ms, event.end_ms));

    // Which name each id belongs to: the name of the first registration that returned it.
    let mut owner: BTreeMap<&str, &str> = BTreeMap::new();
    let mut clashes: BTreeSet<&str> = BTreeSet::new();
    for event in &in_order {
        if let (Op::Register { name }, OpResult::Registered { id, .. }) = (&event.op, &event.result)
        {
            match owner.get(id.as_str()) {
                None => {
                    owner.insert(id, name);
                }
                Some(first) if first != name => {
                    clashes.insert(id);
                }
                Some(_) => {}
            }
        }
    }
    for id in clashes {
        let evidence: Vec<String> = in_order
            .iter()
            .filter(|event| {
                matches!(&event.result, OpResult::Registered { id: returned, .. } if returned == id)
            })
            .map(|event| describe(event))
            .collect();
        violations.push(Violation {
            checker: CHECKER,
            detail: format!(
                "id {id} was returned by registrations of different names; its operations are \
                 checked under the first name only. Registrations:\n  {}",
                evidence.join("\n  ")
            ),
        });
    }

    let mut objects: BTreeMap<&str, Vec<&Event>> = BTreeMap::new();
    for event in &in_order {
        let name = match &event.op {
            Op::Register { name } | Op::ListByName { name } => Some(name.as_str()),
            Op::Pause { id } | Op::Resume { id } | Op::Get { id } => {
                owner.get(id.as_str()).copied()
            }
        };
        if let Some(name) = name {
            objects.entry(name).or_default().push(event);
        }
    }
    for (name, events) in objects {
        if let Some(violation) = check_object(name, &events, limit) {
            violations.push(violation);
        }
    }
    violations
}

/// Runs the search on the operations of one name (in start order) and explains a failure.
fn check_object(name: &str, events: &[&Event], limit: u64) -> Option<Violation> {
    let mut ids = HashMap::new();
    let steps: Vec<Step<'_>> = events
        .iter()
        .filter_map(|event| Step::compile(event, &mut ids))
        .collect();
    let mut search = Search {
        steps: &steps,
        limit,
        spent: 0,
        seen: HashSet::new(),
        path: Vec::new(),
        best: Vec::new(),
    };
    let verdict = search.run();
    let listing = || {
        let lines: Vec<String> = steps
            .iter()
            .enumerate()
            .map(|(index, step)| format!("#{index} {}", describe(step.event)))
            .collect();
        lines.join("\n  ")
    };
    match verdict {
        Verdict::Linearizable => None,
        Verdict::NotLinearizable => {
            let best: Vec<String> = search
                .best
                .iter()
                .map(|index| format!("#{index}"))
                .collect();
            Some(Violation {
                checker: CHECKER,
                detail: format!(
                    "clock name {name:?}: no order of its {} operations respects both real time \
                     and the registry model; longest valid order found ({} operations): [{}]; \
                     operations in start order:\n  {}",
                    steps.len(),
                    best.len(),
                    best.join(", "),
                    listing()
                ),
            })
        }
        Verdict::LimitReached => Some(Violation {
            checker: CHECKER,
            detail: format!(
                "clock name {name:?}: search limit reached ({limit} steps) without a verdict; \
                 operations in start order:\n  {}",
                listing()
            ),
        }),
    }
}

/// What a search concluded.
enum Verdict {
    Linearizable,
    NotLinearizable,
    LimitReached,
}

/// The search ran out of steps.
struct LimitReached;

/// An operation of the object as the search uses it: interned ids, the end of an
/// indeterminate operation at +∞.
struct Step<'a> {
    event: &'a Event,
    start: u64,
    end: u64,
    definite: bool,
    /// For an indeterminate step, what it would do: indeterminate steps of one class are
    /// interchangeable except for their start.
    class: Option<(u8, usize)>,
    call: Call,
    ret: Ret<'a>,
}

/// The operation, with its id interned.
enum Call {
    Register,
    Pause(usize),
    Resume(usize),
    Get(usize),
    List,
}

/// The response, with its ids interned; `Unknown` for an indeterminate one.
enum Ret<'a> {
    Registered(usize, &'a str),
    Status(&'a str),
    Listed(Vec<(usize, &'a str)>),
    NotFound,
    Unknown,
}

impl<'a> Step<'a> {
    /// The step for an event, or `None` for one that cannot matter (an indeterminate read).
    fn compile(event: &'a Event, ids: &mut HashMap<&'a str, usize>) -> Option<Self> {
        let mut intern = |id: &'a str| {
            let next = ids.len();
            *ids.entry(id).or_insert(next)
        };
        let definite = !matches!(event.result, OpResult::Indeterminate(_));
        let call = match &event.op {
            Op::Register { .. } => Call::Register,
            Op::Pause { id } => Call::Pause(intern(id)),
            Op::Resume { id } => Call::Resume(intern(id)),
            Op::Get { id } if definite => Call::Get(intern(id)),
            Op::ListByName { .. } if definite => Call::List,
            Op::Get { .. } | Op::ListByName { .. } => return None,
        };
        let ret = match &event.result {
            OpResult::Registered { id, status } => Ret::Registered(intern(id), status),
            OpResult::Status(status) => Ret::Status(status),
            OpResult::Listed(clocks) => Ret::Listed(
                clocks
                    .iter()
                    .map(|(id, status)| (intern(id), status.as_str()))
                    .collect(),
            ),
            OpResult::NotFound => Ret::NotFound,
            OpResult::Indeterminate(_) => Ret::Unknown,
        };
        let class = match call {
            _ if definite => None,
            Call::Register => Some((0, 0)),
            Call::Pause(id) => Some((1, id)),
            Call::Resume(id) => Some((2, id)),
            Call::Get(id) => Some((3, id)),
            Call::List => Some((4, 0)),
        };
        Some(Step {
            event,
            start: event.start_ms,
            end: if definite {
                event.end_ms.max(event.start_ms)
            } else {
                u64::MAX
            },
            definite,
            class,
            call,
            ret,
        })
    }
}

/// The sequential model of one clock name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Model {
    /// No clock of this name.
    Absent,
    /// The clock; `id` is `None` while only an indeterminate registration created it.
    Present { id: Option<usize>, paused: bool },
}

/// The status word the model's clock shows.
fn word(paused: bool) -> &'static str {
    if paused { "PAUSED" } else { "ACTIVE" }
}

/// Whether the model's clock (with id `known`) is the clock with id `id`.
fn same(known: Option<usize>, id: usize) -> bool {
    known.is_none_or(|known| known == id)
}

/// The model's state after `call` answered `ret`, or `None` when the model could not have
/// answered that.
fn apply(model: Model, call: &Call, ret: &Ret<'_>) -> Option<Model> {
    match (call, model) {
        (Call::Register, Model::Absent) => match ret {
            Ret::Unknown => Some(Model::Present {
                id: None,
                paused: false,
            }),
            Ret::Registered(id, "PENDING") => Some(Model::Present {
                id: Some(*id),
                paused: false,
            }),
            _ => None,
        },
        (Call::Register, Model::Present { id, paused }) => match ret {
            Ret::Unknown => Some(model),
            Ret::Registered(new, status) if same(id, *new) && *status == word(paused) => {
                Some(Model::Present {
                    id: Some(*new),
                    paused,
                })
            }
            _ => None,
        },
        (Call::Pause(target) | Call::Resume(target), _) => {
            let pausing = matches!(call, Call::Pause(_));
            match model {
                Model::Present { id, .. } if same(id, *target) => match ret {
                    Ret::Unknown => Some(Model::Present {
                        id: Some(*target),
                        paused: pausing,
                    }),
                    Ret::Status(status) if *status == word(pausing) => Some(Model::Present {
                        id: Some(*target),
                        paused: pausing,
                    }),
                    _ => None,
                },
                // No clock with that id: 404, nothing changes.
                _ => match ret {
                    Ret::Unknown | Ret::NotFound => Some(model),
                    _ => None,
                },
            }
        }
        (Call::Get(target), _) => match model {
            Model::Present { id, paused } if same(id, *target) => match ret {
                Ret::Status(status) if *status == word(paused) => Some(Model::Present {
                    id: Some(*target),
                    paused,
                }),
                _ => None,
            },
            _ => match ret {
                Ret::NotFound => Some(model),
                _ => None,
            },
        },
        (Call::List, Model::Absent) => match ret {
            Ret::Listed(clocks) if clocks.is_empty() => Some(model),
            _ => None,
        },
        (Call::List, Model::Present { id, paused }) => match ret {
            Ret::Listed(clocks) => match clocks.as_slice() {
                [(listed, status)] if same(id, *listed) && *status == word(paused) => {
                    Some(Model::Present {
                        id: Some(*listed),
                        paused,
                    })
                }
                _ => None,
            },
            _ => None,
        },
    }
}

/// The Wing–Gong search over the steps of one object, in start order.
struct Search<'s, 'a> {
    steps: &'s [Step<'a>],
    limit: u64,
    spent: u64,
    /// Every (linearized set, model state) already explored without success.
    seen: HashSet<(Vec<u64>, Model)>,
    /// The order being tried.
    path: Vec<usize>,
    /// The longest valid order tried, for the report.
    best: Vec<usize>,
}

impl Search<'_, '_> {
    fn run(&mut self) -> Verdict {
        let mut done = vec![0u64; self.steps.len().div_ceil(64)];
        let required = self.steps.iter().filter(|step| step.definite).count();
        match self.explore(&mut done, required, Model::Absent) {
            Ok(true) => Verdict::Linearizable,
            Ok(false) => Verdict::NotLinearizable,
            Err(LimitReached) => Verdict::LimitReached,
        }
    }

    /// Whether the steps not in `done` can follow, from `model`; `required` counts the
    /// definite ones among them (the indeterminate ones may be left out).
    fn explore(
        &mut self,
        done: &mut [u64],
        required: usize,
        model: Model,
    ) -> Result<bool, LimitReached> {
        if required == 0 {
            return Ok(true);
        }
        if !self.seen.insert((done.to_vec(), model)) {
            return Ok(false);
        }
        let is_done = |done: &[u64], index: usize| done[index / 64] & (1 << (index % 64)) != 0;
        // A step may go next only if no pending step ended before it started.
        let first_end = (0..self.steps.len())
            .filter(|&index| !is_done(done, index))
            .map(|index| self.steps[index].end)
            .min()
            .unwrap_or(u64::MAX);
        // Of the pending indeterminate steps of one class, only the earliest is tried: it can
        // go anywhere a later one can (none has an end), so trying the others too would only
        // explore the same orders again, exponentially many with many timeouts.
        let mut classes_tried = Vec::new();
        for index in 0..self.steps.len() {
            let step = &self.steps[index];
            if step.start > first_end {
                break;
            }
            if is_done(done, index) {
                continue;
            }
            if let Some(class) = step.class {
                if classes_tried.contains(&class) {
                    continue;
                }
                classes_tried.push(class);
            }
            self.spent += 1;
            if self.spent > self.limit {
                return Err(LimitReached);
            }
            let Some(next) = apply(model, &step.call, &step.ret) else {
                continue;
            };
            done[index / 64] |= 1 << (index % 64);
            self.path.push(index);
            if self.path.len() > self.best.len() {
                self.best.clone_from(&self.path);
            }
            let left = required - usize::from(step.definite);
            if self.explore(done, left, next)? {
                return Ok(true);
            }
            self.path.pop();
            done[index / 64] &= !(1 << (index % 64));
        }
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(client: usize, start_ms: u64, end_ms: u64, op: Op, result: OpResult) -> Event {
        Event {
            client,
            node: 1,
            op,
            start_ms,
            end_ms,
            result,
        }
    }

    fn register(name: &str) -> Op {
        Op::Register { name: name.into() }
    }
    fn pause(id: &str) -> Op {
        Op::Pause { id: id.into() }
    }
    fn resume(id: &str) -> Op {
        Op::Resume { id: id.into() }
    }
    fn get(id: &str) -> Op {
        Op::Get { id: id.into() }
    }
    fn list(name: &str) -> Op {
        Op::ListByName { name: name.into() }
    }
    fn registered(id: &str, status: &str) -> OpResult {
        OpResult::Registered {
            id: id.into(),
            status: status.into(),
        }
    }
    fn status(s: &str) -> OpResult {
        OpResult::Status(s.into())
    }
    fn listed(clocks: &[(&str, &str)]) -> OpResult {
        OpResult::Listed(
            clocks
                .iter()
                .map(|(id, s)| (id.to_string(), s.to_string()))
                .collect(),
        )
    }
    fn indeterminate() -> OpResult {
        OpResult::Indeterminate("timeout".into())
    }

    #[test]
    fn verdicts() {
        struct Case {
            what: &'static str,
            events: Vec<Event>,
            violations: usize,
            mentions: &'static str,
        }
        let cases = vec![
            Case {
                what: "clean sequential history",
                events: vec![
                    event(0, 0, 5, list("a"), listed(&[])),
                    event(0, 10, 20, register("a"), registered("c1", "PENDING")),
                    event(0, 30, 40, get("c1"), status("ACTIVE")),
                    event(0, 50, 60, list("a"), listed(&[("c1", "ACTIVE")])),
                    event(0, 70, 80, pause("c1"), status("PAUSED")),
                    event(0, 90, 100, register("a"), registered("c1", "PAUSED")),
                    event(0, 110, 120, get("c1"), status("PAUSED")),
                    event(0, 130, 140, resume("c1"), status("ACTIVE")),
                    event(0, 150, 160, list("a"), listed(&[("c1", "ACTIVE")])),
                    event(1, 10, 20, register("b"), registered("c2", "PENDING")),
                    event(1, 30, 40, list("b"), listed(&[("c2", "ACTIVE")])),
                ],
                violations: 0,
                mentions: "",
            },
            Case {
                what: "concurrent registrations returning the same id",
                events: vec![
                    event(0, 0, 50, register("a"), registered("c1", "ACTIVE")),
                    event(1, 10, 40, register("a"), registered("c1", "PENDING")),
                    event(2, 20, 60, register("a"), registered("c1", "ACTIVE")),
                    event(0, 70, 80, get("c1"), status("ACTIVE")),
                ],
                violations: 0,
                mentions: "",
            },
            Case {
                what: "stale read after an acknowledged pause",
                events: vec![
                    event(0, 0, 10, register("a"), registered("c1", "PENDING")),
                    event(0, 20, 30, pause("c1"), status("PAUSED")),
                    event(1, 40, 50, get("c1"), status("ACTIVE")),
                ],
                violations: 1,
                mentions: "clock name \"a\"",
            },
            Case {
                what: "a read concurrent with a pause may see either status",
                events: vec![
                    event(0, 0, 10, register("a"), registered("c1", "PENDING")),
                    event(0, 20, 60, pause("c1"), status("PAUSED")),
                    event(1, 30, 40, get("c1"), status("ACTIVE")),
                    event(2, 30, 40, get("c1"), status("PAUSED")),
                ],
                violations: 0,
                mentions: "",
            },
            Case {
                what: "a read cannot go back to ACTIVE once another concurrent read saw PAUSED",
                events: vec![
                    event(0, 0, 10, register("a"), registered("c1", "PENDING")),
                    event(0, 20, 100, pause("c1"), status("PAUSED")),
                    event(1, 30, 40, get("c1"), status("PAUSED")),
                    event(2, 50, 60, get("c1"), status("ACTIVE")),
                ],
                violations: 1,
                mentions: "longest valid order",
            },
            Case {
                what: "two registrations of one name returning different ids",
                events: vec![
                    event(0, 0, 50, register("a"), registered("c1", "PENDING")),
                    event(1, 10, 40, register("a"), registered("c2", "PENDING")),
                ],
                violations: 1,
                mentions: "clock name \"a\"",
            },
            Case {
                what: "indeterminate pause, then a get that saw it",
                events: vec![
                    event(0, 0, 10, register("a"), registered("c1", "PENDING")),
                    event(0, 20, 30, pause("c1"), indeterminate()),
                    event(1, 40, 50, get("c1"), status("PAUSED")),
                ],
                violations: 0,
                mentions: "",
            },
            Case {
                what: "indeterminate pause, then a get that did not see it",
                events: vec![
                    event(0, 0, 10, register("a"), registered("c1", "PENDING")),
                    event(0, 20, 30, pause("c1"), indeterminate()),
                    event(1, 40, 50, get("c1"), status("ACTIVE")),
                ],
                violations: 0,
                mentions: "",
            },
            Case {
                what: "indeterminate pause taking effect between two gets",
                events: vec![
                    event(0, 0, 10, register("a"), registered("c1", "PENDING")),
                    event(0, 20, 30, pause("c1"), indeterminate()),
                    event(1, 40, 50, get("c1"), status("ACTIVE")),
                    event(1, 60, 70, get("c1"), status("PAUSED")),
                ],
                violations: 0,
                mentions: "",
            },
            Case {
                what: "indeterminate pause cannot be undone by itself",
                events: vec![
                    event(0, 0, 10, register("a"), registered("c1", "PENDING")),
                    event(0, 20, 30, pause("c1"), indeterminate()),
                    event(1, 40, 50, get("c1"), status("PAUSED")),
                    event(1, 60, 70, get("c1"), status("ACTIVE")),
                ],
                violations: 1,
                mentions: "get(c1)",
            },
            Case {
                what: "a list missing an acknowledged clock",
                events: vec![
                    event(0, 0, 10, register("a"), registered("c1", "PENDING")),
                    event(1, 20, 30, list("a"), listed(&[])),
                ],
                violations: 1,
                mentions: "list(name=\"a\")",
            },
            Case {
                what: "a list concurrent with the registration may miss the clock",
                events: vec![
                    event(0, 0, 30, register("a"), registered("c1", "PENDING")),
                    event(1, 10, 20, list("a"), listed(&[])),
                ],
                violations: 0,
                mentions: "",
            },
            Case {
                what: "404 before the registration, found after",
                events: vec![
                    event(0, 0, 10, get("c1"), OpResult::NotFound),
                    event(0, 20, 30, register("a"), registered("c1", "PENDING")),
                    event(0, 40, 50, get("c1"), status("ACTIVE")),
                ],
                violations: 0,
                mentions: "",
            },
            Case {
                what: "404 after an acknowledged registration",
                events: vec![
                    event(0, 0, 10, register("a"), registered("c1", "PENDING")),
                    event(1, 20, 30, pause("c1"), OpResult::NotFound),
                ],
                violations: 1,
                mentions: "pause(c1)",
            },
            Case {
                what: "an indeterminate registration that took effect (id seen in a list)",
                events: vec![
                    event(0, 0, 10, register("a"), indeterminate()),
                    event(1, 20, 30, list("a"), listed(&[("c1", "ACTIVE")])),
                    event(1, 40, 50, register("a"), registered("c1", "ACTIVE")),
                    event(1, 60, 70, get("c1"), status("ACTIVE")),
                ],
                violations: 0,
                mentions: "",
            },
            Case {
                what: "the clock an indeterminate registration created cannot change id",
                events: vec![
                    event(0, 0, 10, register("a"), indeterminate()),
                    event(1, 20, 30, list("a"), listed(&[("c1", "ACTIVE")])),
                    event(1, 40, 50, list("a"), listed(&[("c9", "ACTIVE")])),
                ],
                violations: 1,
                mentions: "clock name \"a\"",
            },
            Case {
                what: "a created clock shows PENDING in its registration",
                events: vec![event(0, 0, 10, register("a"), registered("c1", "ACTIVE"))],
                violations: 1,
                mentions: "registered c1 ACTIVE",
            },
            Case {
                what: "a re-registration shows the current status",
                events: vec![
                    event(0, 0, 10, register("a"), registered("c1", "PENDING")),
                    event(0, 20, 30, pause("c1"), status("PAUSED")),
                    event(0, 40, 50, register("a"), registered("c1", "ACTIVE")),
                ],
                violations: 1,
                mentions: "clock name \"a\"",
            },
            Case {
                what: "operations on ids no registration returned are skipped",
                events: vec![
                    event(0, 0, 10, get("ghost"), status("ACTIVE")),
                    event(0, 20, 30, pause("ghost"), OpResult::NotFound),
                ],
                violations: 0,
                mentions: "",
            },
            Case {
                what: "one id returned for two names",
                events: vec![
                    event(0, 0, 10, register("a"), registered("c1", "PENDING")),
                    event(0, 20, 30, register("b"), registered("c1", "PENDING")),
                ],
                violations: 1,
                mentions: "id c1 was returned by registrations of different names",
            },
        ];
        for case in cases {
            let violations = check(&case.events);
            super::super::assert_verdict(
                case.what,
                &violations,
                CHECKER,
                case.violations,
                case.mentions,
            );
        }
    }

    #[test]
    fn names_are_independent_objects() {
        // A stale read on "b" is reported under "b" only.
        let events = vec![
            event(0, 0, 10, register("a"), registered("c1", "PENDING")),
            event(1, 0, 10, register("b"), registered("c2", "PENDING")),
            event(1, 20, 30, pause("c2"), status("PAUSED")),
            event(0, 40, 50, get("c2"), status("ACTIVE")),
            event(0, 40, 50, get("c1"), status("ACTIVE")),
        ];
        let violations = check(&events);
        assert_eq!(violations.len(), 1, "{violations:#?}");
        assert!(violations[0].detail.starts_with("clock name \"b\""));
        assert!(!violations[0].detail.contains("c1"));
    }

    #[test]
    fn the_search_limit_is_reported() {
        let mut events = vec![event(0, 0, 10, register("a"), registered("c1", "PENDING"))];
        for client in 0..4 {
            events.push(event(client, 20, 90, get("c1"), status("ACTIVE")));
        }
        events.push(event(0, 100, 110, get("c1"), status("PAUSED")));
        let violations = check_with_limit(&events, 3);
        assert_eq!(violations.len(), 1, "{violations:#?}");
        assert!(violations[0].detail.contains("search limit reached"));
        // With room to search, the same history is simply not linearizable.
        let violations = check(&events);
        assert_eq!(violations.len(), 1, "{violations:#?}");
        assert!(violations[0].detail.contains("no order"));
    }

    /// Many timed-out writes (as a long partition produces) would make the search try every
    /// subset of them in every order; it must still reach a verdict quickly.
    #[test]
    fn many_indeterminate_writes_do_not_blow_up_the_search() {
        let mut events = vec![event(0, 0, 5, register("a"), registered("c1", "PENDING"))];
        for client in 0..24 {
            let op = if client % 2 == 0 {
                pause("c1")
            } else {
                resume("c1")
            };
            let start = 10 + client as u64;
            events.push(event(client + 1, start, start + 10, op, indeterminate()));
        }
        for k in 0..10 {
            let seen = if k % 2 == 0 { "PAUSED" } else { "ACTIVE" };
            events.push(event(
                0,
                100 + 10 * k,
                105 + 10 * k,
                get("c1"),
                status(seen),
            ));
        }
        assert!(check_with_limit(&events, 100_000).is_empty());
        events.push(event(0, 300, 305, get("c1"), OpResult::NotFound));
        let violations = check_with_limit(&events, 100_000);
        assert_eq!(violations.len(), 1, "{violations:#?}");
        assert!(violations[0].detail.contains("no order"), "{violations:#?}");
    }

    /// A long history of 4 concurrent clients that a correct registry produced (each operation
    /// took effect at a point inside its interval), with some indeterminate results, is
    /// accepted well within the limit.
    #[test]
    fn a_long_concurrent_correct_history_passes() {
        let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = move |bound: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % bound
        };
        // The true sequential execution: one clock "a" with id c1, state (exists, paused).
        let mut exists = false;
        let mut paused = false;
        let mut client_free = [0u64; 4];
        let mut events = Vec::new();
        let mut point = 0;
        for _ in 0..60 {
            point += 1 + next(20);
            let client = usize::try_from(next(4)).expect("small");
            // The client must be idle: start no earlier than its last end.
            let start = point.saturating_sub(next(30)).max(client_free[client]);
            if start > point {
                continue;
            }
            let end = point + next(30);
            client_free[client] = end + 1;
            let (op, result) = match next(5) {
                0 => {
                    let result = if exists {
                        registered("c1", if paused { "PAUSED" } else { "ACTIVE" })
                    } else {
                        registered("c1", "PENDING")
                    };
                    exists = true;
                    (register("a"), result)
                }
                1 if exists => {
                    paused = true;
                    (pause("c1"), status("PAUSED"))
                }
                2 if exists => {
                    paused = false;
                    (resume("c1"), status("ACTIVE"))
                }
                3 if exists => (get("c1"), status(if paused { "PAUSED" } else { "ACTIVE" })),
                1..=3 => (get("c1"), OpResult::NotFound),
                _ => {
                    let clocks: &[(&str, &str)] = if exists {
                        &[("c1", if paused { "PAUSED" } else { "ACTIVE" })]
                    } else {
                        &[]
                    };
                    (list("a"), listed(clocks))
                }
            };
            let result = if next(8) == 0 {
                indeterminate()
            } else {
                result
            };
            events.push(event(client, start, end, op, result));
        }
        assert!(events.len() > 40, "{}", events.len());
        let violations = check_with_limit(&events, 200_000);
        assert!(violations.is_empty(), "{violations:#?}");
    }
}
