//! A deterministic simulation of a whole tickd cluster in one process.
//!
//! Each seed runs a 3- or 5-node cluster made of the real pieces that decide what tickd
//! promises — openraft with production's configuration, the replicated state and its
//! `apply` ([`tickd_raft::ReplicatedState`]), the engine's decisions
//! ([`tickd_engine::decisions`]) — over simulated ones: a disk that loses what was not
//! fsynced when a node crashes ([`disk`]), a network that loses, duplicates, delays and cuts
//! messages ([`network`], [`world`]), a broker that refuses and confirms late ([`broker`]),
//! and clients, pollers and a nemesis that draw every choice from the seed ([`workload`],
//! [`poller`], [`faults`]).
//! The chaos suite's checkers judge every history ([`run`]).
//!
//! Time is virtual: the run is one tokio runtime on one thread with its clock paused, which
//! jumps to the next timer whenever every task waits, so a simulated minute costs only the
//! work done in it. Everything that could differ between two runs of a seed is fixed:
//!
//! - **the clock**: tokio's paused clock, read by openraft, the engine and the nodes' wall
//!   clocks ([`world::World::wall_ms`]);
//! - **randomness**: the seed's streams ([`tickd_tests::chaos::rng::Rng`]) for the world, and
//!   for openraft's election timeouts through the runtime it is built on ([`runtime`]);
//! - **scheduling**: one thread, whose run queue tokio serves in order; `select!` is biased
//!   wherever the simulation or openraft's core loop uses it, and the one unbiased `select!`
//!   in the path (a replication stream's back-off after `Unreachable`) is never reached,
//!   since the network reports every failure otherwise;
//! - **the disk and the network**: modelled, never the host's.
//!
//! A run's [`trace`] hashes every event that decides its history; the same seed gives the
//! same hash on any machine.

pub mod broker;
pub mod client;
pub mod clocks;
pub mod cluster;
pub mod disk;
pub mod engine;
pub mod faults;
pub mod log_store;
pub mod network;
pub mod poller;
pub mod run;
pub mod runtime;
pub mod state_machine;
pub mod trace;
pub mod workload;
pub mod world;

pub use run::{Options, SeedReport, run_seed};
