//! One module per resource; each handler is a thin adapter from HTTP to the replica.

pub mod backup;
pub mod clocks;
pub mod cluster;
pub mod events;
pub mod health;
pub mod metrics;
pub mod queues;
pub mod schedules;
pub mod stats;
