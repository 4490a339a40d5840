//! How a clock and a registration are written: with the RabbitMQ queue's name spelled out.
//!
//! v0.1.0 stored every RabbitMQ clock's queue name (`ticktok-<name>;<schedule>`) and reads it
//! back from snapshots, log entries and Raft responses, so this release still writes it there.
//! It does not keep it: the name follows from the clock's name and schedule, and keeping it
//! cost a RabbitMQ clock about 74 bytes (`registry-bytes`: 382 against 308 at 200 000). Reading,
//! the written name is dropped and the derived one is used from then on.
//!
//! Only a hand-edited backup restored into a v0.1.0 cluster (which did not check) can hold a
//! name other than the derived one; after the upgrade such a clock publishes to the derived
//! queue, the one Ticktok's clients consume from. A backup restored into this release is
//! checked as written ([`WrittenClocks`]) before it is proposed, and refused if it names
//! another queue.

use serde::ser::SerializeStruct;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::clock::{Channel, Clock, ClockId, ClockStatus, QueueId};
use crate::excerpt::Excerpt;
use crate::overlap::Overlap;
use crate::restore::RestoreError;
use crate::schedule::Schedule;
use crate::webhook::Webhook;

/// A channel as it is written.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
enum ChannelForm {
    /// The queue's name, read and dropped.
    Rabbit {
        queue: String,
    },
    Http {
        queue_id: QueueId,
    },
    /// Tagged `webhook`, with the receiver's `url` and the signing `secret` beside the tag.
    Webhook(Box<Webhook>),
}

impl ChannelForm {
    /// The written form of `channel`, the channel of the clock (`name`, `schedule`).
    fn of(channel: &Channel, name: &str, schedule: &Schedule) -> Self {
        match channel {
            Channel::Rabbit => ChannelForm::Rabbit {
                queue: Channel::rabbit_queue_name(name, schedule),
            },
            Channel::Http { queue_id } => ChannelForm::Http {
                queue_id: queue_id.clone(),
            },
            Channel::Webhook(webhook) => ChannelForm::Webhook(webhook.clone()),
        }
    }
}

impl From<ChannelForm> for Channel {
    fn from(form: ChannelForm) -> Self {
        match form {
            ChannelForm::Rabbit { .. } => Channel::Rabbit,
            ChannelForm::Http { queue_id } => Channel::Http { queue_id },
            ChannelForm::Webhook(webhook) => Channel::Webhook(webhook),
        }
    }
}

impl Serialize for Clock {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut clock = serializer.serialize_struct("Clock", 6)?;
        clock.serialize_field("id", &self.id)?;
        clock.serialize_field("name", &self.name)?;
        clock.serialize_field("schedule", &self.schedule)?;
        clock.serialize_field("status", &self.status)?;
        let channel = ChannelForm::of(&self.channel, &self.name, &self.schedule);
        clock.serialize_field("channel", &channel)?;
        overlap_field(&mut clock, self.overlap)?;
        clock.end()
    }
}

/// A clock as it is read.
#[derive(Deserialize)]
struct ClockForm {
    id: ClockId,
    name: Box<str>,
    schedule: Schedule,
    status: ClockStatus,
    channel: ChannelForm,
    #[serde(default)]
    overlap: Overlap,
}

impl<'de> Deserialize<'de> for Clock {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let form = ClockForm::deserialize(deserializer)?;
        Ok(Clock {
            id: form.id,
            name: form.name,
            schedule: form.schedule,
            status: form.status,
            channel: form.channel.into(),
            overlap: form.overlap,
        })
    }
}

/// A backup's clocks as written, for what a decoded clock no longer says: the name of the
/// queue each RabbitMQ clock spells. Read from the backup's `registry` beside its decoding.
#[derive(Deserialize)]
pub struct WrittenClocks {
    clocks: Vec<ClockForm>,
}

impl WrittenClocks {
    /// Checks that every RabbitMQ clock names the queue its name and schedule give, the one
    /// Ticktok's clients consume from; a backup naming another was edited, and restoring it
    /// would move the clock's ticks without a word.
    pub fn validate_rabbit_queues(&self) -> Result<(), RestoreError> {
        for clock in &self.clocks {
            if let ChannelForm::Rabbit { queue } = &clock.channel {
                let expected = Channel::rabbit_queue_name(&clock.name, &clock.schedule);
                if *queue != expected {
                    return Err(RestoreError::RabbitQueue {
                        id: clock.id.clone(),
                        found: Excerpt::of(queue),
                        expected: Excerpt::of(&expected),
                    });
                }
            }
        }
        Ok(())
    }
}

/// The fields of a `Command::Register`, in their order: name, schedule, id, channel,
/// max_clocks, now_ms, overlap.
pub(crate) type Registration = (String, Schedule, ClockId, Channel, u64, u64, Overlap);

/// Writes `overlap` unless it is [`Overlap::Allow`]: a clock or a registration without
/// overlap control is written as releases without it wrote it.
fn overlap_field<S: SerializeStruct>(form: &mut S, overlap: Overlap) -> Result<(), S::Error> {
    if overlap.is_allow() {
        form.skip_field("overlap")
    } else {
        form.serialize_field("overlap", &overlap)
    }
}

/// Writes a `Command::Register`'s fields, its channel in its written form.
#[allow(
    clippy::too_many_arguments,
    reason = "serde's serialize_with of a struct variant passes each of its fields"
)]
pub(crate) fn serialize_registration<S: Serializer>(
    name: &str,
    schedule: &Schedule,
    id: &ClockId,
    channel: &Channel,
    max_clocks: &u64,
    now_ms: &u64,
    overlap: &Overlap,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    let mut register = serializer.serialize_struct("Register", 7)?;
    register.serialize_field("name", name)?;
    register.serialize_field("schedule", schedule)?;
    register.serialize_field("id", id)?;
    register.serialize_field("channel", &ChannelForm::of(channel, name, schedule))?;
    register.serialize_field("max_clocks", max_clocks)?;
    register.serialize_field("now_ms", now_ms)?;
    overlap_field(&mut register, *overlap)?;
    register.end()
}

/// A `Command::Register` as it is read.
#[derive(Deserialize)]
struct RegistrationForm {
    name: String,
    schedule: Schedule,
    id: ClockId,
    channel: ChannelForm,
    max_clocks: u64,
    now_ms: u64,
    #[serde(default)]
    overlap: Overlap,
}

/// Reads a `Command::Register`'s fields.
pub(crate) fn deserialize_registration<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Registration, D::Error> {
    let form = RegistrationForm::deserialize(deserializer)?;
    Ok((
        form.name,
        form.schedule,
        form.id,
        form.channel.into(),
        form.max_clocks,
        form.now_ms,
        form.overlap,
    ))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::Command;

    fn clock(channel: Channel) -> Result<Clock, crate::ScheduleError> {
        Ok(Clock {
            id: ClockId::new("c1".to_owned()),
            name: "a;b".into(),
            schedule: Schedule::parse("every.5.seconds")?,
            status: ClockStatus::Paused,
            channel,
            overlap: Overlap::Allow,
        })
    }

    #[test]
    fn a_clock_is_written_as_v0_1_0_wrote_it_queue_name_and_all()
    -> Result<(), Box<dyn std::error::Error>> {
        let rabbit = clock(Channel::Rabbit)?;
        let written = json!({
            "id": "c1",
            "name": "a;b",
            "schedule": "every.5.seconds",
            "status": "PAUSED",
            "channel": {"type": "rabbit", "queue": "ticktok-a;b;every.5.seconds"},
        });
        assert_eq!(serde_json::to_value(&rabbit)?, written);
        assert_eq!(serde_json::from_value::<Clock>(written)?, rabbit);

        let http = clock(Channel::Http {
            queue_id: QueueId::new("q1".to_owned()),
        })?;
        let json = serde_json::to_value(&http)?;
        assert_eq!(json["channel"], json!({"type": "http", "queue_id": "q1"}));
        assert_eq!(serde_json::from_value::<Clock>(json)?, http);
        Ok(())
    }

    #[test]
    fn overlap_control_is_written_only_when_a_clock_or_a_registration_has_it()
    -> Result<(), Box<dyn std::error::Error>> {
        let mut skipping = clock(Channel::Http {
            queue_id: QueueId::new("q1".to_owned()),
        })?;
        skipping.overlap = Overlap::Skip;
        let json = serde_json::to_value(&skipping)?;
        assert_eq!(json["overlap"], json!("skip"));
        assert_eq!(serde_json::from_value::<Clock>(json)?, skipping);
        let register = Command::Register {
            name: "n".to_owned(),
            schedule: Schedule::parse("@never")?,
            id: ClockId::new("c2".to_owned()),
            channel: skipping.channel.clone(),
            max_clocks: 1,
            now_ms: 0,
            overlap: Overlap::BufferOne,
        };
        let json = serde_json::to_value(&register)?;
        assert_eq!(json["Register"]["overlap"], json!("buffer_one"));
        assert_eq!(serde_json::from_value::<Command>(json)?, register);
        Ok(())
    }

    #[test]
    fn a_written_queue_name_is_read_and_the_derived_one_used()
    -> Result<(), Box<dyn std::error::Error>> {
        let mut written = serde_json::to_value(clock(Channel::Rabbit)?)?;
        written["channel"]["queue"] = json!("amq.direct");
        let read = serde_json::from_value::<Clock>(written)?;
        assert_eq!(
            read.rabbit_queue().as_deref(),
            Some("ticktok-a;b;every.5.seconds")
        );
        Ok(())
    }

    #[test]
    fn a_backup_that_names_another_queue_is_refused() -> Result<(), Box<dyn std::error::Error>> {
        let mut written = json!({"clocks": [serde_json::to_value(clock(Channel::Rabbit)?)?]});
        let clocks = WrittenClocks::deserialize(&written)?;
        assert_eq!(clocks.validate_rabbit_queues(), Ok(()));
        written["clocks"][0]["channel"]["queue"] = json!("amq.direct");
        let refusal = WrittenClocks::deserialize(&written)?
            .validate_rabbit_queues()
            .map_err(|error| error.to_string());
        assert_eq!(
            refusal,
            Err(
                "clock c1: channel.queue is \"amq.direct\", but this clock's RabbitMQ queue is \
                 \"ticktok-a;b;every.5.seconds\""
                    .to_owned()
            )
        );
        Ok(())
    }

    #[test]
    fn a_registration_is_written_as_v0_1_0_wrote_it() -> Result<(), Box<dyn std::error::Error>> {
        let register = Command::Register {
            name: "a;b".to_owned(),
            schedule: Schedule::parse("every.5.seconds")?,
            id: ClockId::new("c1".to_owned()),
            channel: Channel::Rabbit,
            max_clocks: 10,
            now_ms: 7,
            overlap: Overlap::Allow,
        };
        let written = json!({"Register": {
            "name": "a;b",
            "schedule": "every.5.seconds",
            "id": "c1",
            "channel": {"type": "rabbit", "queue": "ticktok-a;b;every.5.seconds"},
            "max_clocks": 10,
            "now_ms": 7,
        }});
        assert_eq!(serde_json::to_value(&register)?, written);
        assert_eq!(serde_json::from_value::<Command>(written)?, register);

        let http = json!({"Register": {
            "name": "n",
            "schedule": "@never",
            "id": "c2",
            "channel": {"type": "http", "queue_id": "q1"},
            "max_clocks": 1,
            "now_ms": 0,
        }});
        let command = serde_json::from_value::<Command>(http.clone())?;
        assert!(matches!(
            &command,
            Command::Register { channel: Channel::Http { queue_id }, .. } if queue_id.text() == "q1"
        ));
        assert_eq!(serde_json::to_value(&command)?, http);
        Ok(())
    }
}
