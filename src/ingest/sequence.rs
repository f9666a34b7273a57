//! Message topics and sequence numbers: what an engine's three-frame messages say besides the
//! payload, and what a sequence number says about the messages before it.

/// A message topic, `kv@<pod>@<model>`: which engine published it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Topic<'a> {
    /// The pod (server) name.
    pub pod: &'a str,
    /// The model name (it may itself contain `@`).
    pub model: &'a str,
}

impl<'a> Topic<'a> {
    /// Parses `kv@<pod>@<model>`; `None` for anything else (vLLM's and SGLang's default topic
    /// is empty: name the worker on the endpoint instead).
    ///
    /// ```
    /// use flash_indexer::ingest::Topic;
    ///
    /// let topic = Topic::parse(b"kv@pod-3@Qwen/Qwen3-0.6B").unwrap();
    /// assert_eq!((topic.pod, topic.model), ("pod-3", "Qwen/Qwen3-0.6B"));
    /// assert_eq!(Topic::parse(b"kv-events"), None);
    /// assert_eq!(Topic::parse(b""), None);
    /// ```
    pub fn parse(raw: &'a [u8]) -> Option<Topic<'a>> {
        let rest = std::str::from_utf8(raw).ok()?.strip_prefix("kv@")?;
        let (pod, model) = rest.split_once('@')?;
        (!pod.is_empty() && !model.is_empty()).then_some(Topic { pod, model })
    }
}

/// The sequence number frame: 8 bytes, big-endian.
pub(crate) fn parse_seq(frame: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(frame.try_into().ok()?))
}

/// The replay stream's end marker: sequence number -1.
pub(crate) const END_OF_REPLAY: u64 = u64::MAX;

/// What a sequence number says about the messages before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SeqCheck {
    /// The first message since the tracker was reset, or the one after the last applied.
    Next,
    /// Applied already by the replay that resynchronized this publisher: live messages that
    /// were queued while it ran.
    AlreadyApplied,
    /// Messages `first ..= last` are missing.
    Gap { first: u64, last: u64 },
    /// So far ahead (over [`MAX_GAP`] numbers skipped) that no engine published the messages in
    /// between: nonsense or a new numbering, not a loss to count.
    Jump,
    /// Not after the last one applied, and not covered by a replay: the engine restarted and
    /// numbers from 0 again (or sent nonsense).
    Behind,
}

/// The most sequence numbers one gap may skip and still count as lost messages: 2^32, days of
/// batches at any rate an engine publishes. A larger gap is a [`SeqCheck::Jump`].
pub(crate) const MAX_GAP: u64 = 1 << 32;

/// The last sequence number applied from one publisher.
///
/// Every number is meaningful: a number far ahead is a gap like any other (the replay cannot
/// fill it and the publisher is resynchronized), a number behind is a restart. No single number
/// can make later valid ones be dropped: after a resynchronization the tracker follows the
/// engine's buffer, and after a reset it takes the next number as it comes.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SeqTracker {
    last: Option<u64>,
    /// The end of the replay that last resynchronized the publisher, until a newer message is
    /// applied.
    replayed_through: Option<u64>,
}

impl SeqTracker {
    pub(crate) fn check(&self, seq: u64) -> SeqCheck {
        let Some(last) = self.last else {
            return SeqCheck::Next;
        };
        if last.checked_add(1) == Some(seq) {
            SeqCheck::Next
        } else if seq <= last {
            match self.replayed_through {
                Some(end) if seq <= end => SeqCheck::AlreadyApplied,
                _ => SeqCheck::Behind,
            }
        } else if seq - last - 1 > MAX_GAP {
            SeqCheck::Jump
        } else {
            SeqCheck::Gap {
                first: last + 1,
                last: seq - 1,
            }
        }
    }

    pub(crate) fn last(&self) -> Option<u64> {
        self.last
    }

    pub(crate) fn applied(&mut self, seq: u64) {
        self.last = Some(seq);
        if self.replayed_through.is_some_and(|end| seq > end) {
            self.replayed_through = None;
        }
    }

    /// A replay applied everything up to `seq`: live copies of those are to be skipped.
    pub(crate) fn replayed_through(&mut self, seq: u64) {
        self.last = Some(seq);
        self.replayed_through = Some(seq);
    }

    /// Forget everything: the next number starts the stream.
    pub(crate) fn reset(&mut self) {
        *self = SeqTracker::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_numbers_classify_gaps_and_restarts() {
        let mut tracker = SeqTracker::default();
        assert_eq!(tracker.check(5), SeqCheck::Next, "joining mid-stream");
        tracker.applied(5);
        assert_eq!(tracker.check(6), SeqCheck::Next);
        assert_eq!(tracker.check(9), SeqCheck::Gap { first: 6, last: 8 });
        assert_eq!(tracker.check(5), SeqCheck::Behind);
        assert_eq!(tracker.check(0), SeqCheck::Behind);
    }

    #[test]
    fn a_replay_covers_the_live_messages_queued_behind_it() {
        let mut tracker = SeqTracker::default();
        tracker.replayed_through(10);
        assert_eq!(tracker.check(3), SeqCheck::AlreadyApplied);
        assert_eq!(tracker.check(10), SeqCheck::AlreadyApplied);
        assert_eq!(tracker.check(11), SeqCheck::Next);
        tracker.applied(11);
        assert_eq!(
            tracker.check(3),
            SeqCheck::Behind,
            "past the replay: a restart"
        );
    }

    #[test]
    fn wild_numbers_neither_overflow_nor_wedge() {
        let mut tracker = SeqTracker::default();
        tracker.applied(0);
        assert_eq!(tracker.check(u64::MAX - 1), SeqCheck::Jump);
        assert_eq!(
            tracker.check(MAX_GAP + 1),
            SeqCheck::Gap {
                first: 1,
                last: MAX_GAP
            }
        );
        assert_eq!(tracker.check(MAX_GAP + 2), SeqCheck::Jump);
        tracker.applied(u64::MAX - 1);
        assert_eq!(tracker.check(u64::MAX), SeqCheck::Next);
        tracker.applied(u64::MAX);
        assert_eq!(tracker.check(u64::MAX), SeqCheck::Behind);
        assert_eq!(tracker.check(0), SeqCheck::Behind);
        tracker.reset();
        assert_eq!(tracker.check(7), SeqCheck::Next, "a reset takes what comes");
    }

    #[test]
    fn frames_parse_strictly() {
        assert_eq!(parse_seq(&7u64.to_be_bytes()), Some(7));
        assert_eq!(parse_seq(&[0; 7]), None);
        assert_eq!(parse_seq(&(-1i64).to_be_bytes()), Some(END_OF_REPLAY));
        assert_eq!(Topic::parse(b"kv@@model"), None);
        assert_eq!(Topic::parse(b"kv@pod@"), None);
        assert_eq!(Topic::parse(b"kv@a@b@c").map(|t| t.model), Some("b@c"));
        assert_eq!(Topic::parse(&[0xff, b'@']), None);
    }
}
