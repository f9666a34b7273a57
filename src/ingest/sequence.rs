//! Message topics and sequence numbers: what an engine's three-frame messages say besides the
//! payload.

/// A message topic, `kv@<pod>@<model>`: which engine published it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Topic<'a> {
    /// The pod (server) name.
    pub pod: &'a str,
    /// The model name (it may itself contain `@`).
    pub model: &'a str,
}

impl<'a> Topic<'a> {
    /// Parses `kv@<pod>@<model>`; `None` for anything else.
    ///
    /// ```
    /// use flash_indexer::ingest::Topic;
    ///
    /// let topic = Topic::parse(b"kv@pod-3@Qwen/Qwen3-0.6B").unwrap();
    /// assert_eq!((topic.pod, topic.model), ("pod-3", "Qwen/Qwen3-0.6B"));
    /// assert_eq!(Topic::parse(b"kv-events"), None);
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
    /// The first message seen, or the one after the last.
    InOrder,
    /// Messages `first ..= last` were lost.
    Gap { first: u64, last: u64 },
    /// Not after the last one: the engine restarted and numbers from 0 again.
    Restarted,
}

/// The last sequence number applied from one publisher.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SeqTracker {
    last: Option<u64>,
}

impl SeqTracker {
    pub(crate) fn check(&self, seq: u64) -> SeqCheck {
        match self.last {
            None => SeqCheck::InOrder,
            Some(last) if seq <= last => SeqCheck::Restarted,
            Some(last) if seq == last + 1 => SeqCheck::InOrder,
            Some(last) => SeqCheck::Gap {
                first: last + 1,
                last: seq - 1,
            },
        }
    }

    pub(crate) fn last(&self) -> Option<u64> {
        self.last
    }

    pub(crate) fn applied(&mut self, seq: u64) {
        self.last = Some(seq);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_numbers_classify_gaps_and_restarts() {
        let mut tracker = SeqTracker::default();
        assert_eq!(
            tracker.check(5),
            SeqCheck::InOrder,
            "joining mid-stream is no gap"
        );
        tracker.applied(5);
        assert_eq!(tracker.check(6), SeqCheck::InOrder);
        assert_eq!(tracker.check(9), SeqCheck::Gap { first: 6, last: 8 });
        assert_eq!(tracker.check(5), SeqCheck::Restarted);
        assert_eq!(tracker.check(0), SeqCheck::Restarted);
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
