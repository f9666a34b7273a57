//! Where a [`Subscriber`](super::Subscriber)'s events go: a writer pool over any index, or a
//! hybrid index (several KV-cache groups) that the endpoint threads apply in place.

use super::decode::KvEventBatch;
use super::map::{EventMapper, MapError};
use crate::pool::{SubmitError, WriterPool};
use crate::{Event, KvIndex, Worker};

/// One batch mapped for a sink.
pub(crate) struct Batch<T> {
    /// What the sink takes, in the engine's order.
    pub(crate) items: Vec<T>,
    /// Events of filtered-out tiers or groups.
    pub(crate) filtered: usize,
    /// Events the mapping refused, with the reason.
    pub(crate) rejected: Vec<MapError>,
}

/// What became of one offered item.
// A pool only queues: the index's verdicts come from a sink that applies in place (`hybrid`).
#[cfg_attr(not(feature = "hybrid"), allow(dead_code))]
pub(crate) enum Offer<T> {
    /// Taken: queued, or applied.
    Taken,
    /// Not now: offer it again later.
    Full(T),
    /// Applied by the index with a warning (a removal naming blocks it did not hold).
    Warned(String),
    /// Refused by the index; nothing changed.
    Refused(String),
    /// Never will be taken: the pool's writer thread is gone.
    Gone(String),
}

/// A destination of mapped events.
pub(crate) trait Sink: Send + Sync + 'static {
    /// One event as the sink takes it.
    type Item: Send;
    /// Maps one decoded batch; its events get `event_id`.
    fn map(&self, mapper: &EventMapper, batch: &KvEventBatch, event_id: u64) -> Batch<Self::Item>;
    /// The item that drops everything `worker` holds.
    fn cleared(&self, worker: Worker, event_id: u64) -> Self::Item;
    /// Hands one item over, without waiting.
    fn offer(&self, item: Self::Item) -> Offer<Self::Item>;
    /// Applies a whole batch's items at once, where the sink applies in place (so that an index
    /// can publish them together): each item's verdict, in order. A sink that queues gives them
    /// back, to be offered one at a time.
    fn apply_all(&self, items: Vec<Self::Item>) -> Result<Vec<Offer<Self::Item>>, Vec<Self::Item>> {
        Err(items)
    }
    /// Drops every rank of worker `id`, after the items offered before.
    fn remove_worker(&self, id: u64);
}

/// Events queued in a writer pool, whose per-worker queues apply them in order.
impl<I: KvIndex + ?Sized + 'static> Sink for WriterPool<I> {
    type Item = Event;

    fn map(&self, mapper: &EventMapper, batch: &KvEventBatch, event_id: u64) -> Batch<Event> {
        let mapped = mapper.map(batch, event_id);
        Batch {
            items: mapped.events,
            filtered: mapped.filtered,
            rejected: mapped.rejected,
        }
    }

    fn cleared(&self, worker: Worker, event_id: u64) -> Event {
        Event::cleared(worker, event_id)
    }

    fn offer(&self, event: Event) -> Offer<Event> {
        match self.try_submit(event) {
            Ok(()) => Offer::Taken,
            Err(SubmitError::Full(back)) => Offer::Full(back),
            Err(error) => Offer::Gone(error.to_string()),
        }
    }

    fn remove_worker(&self, id: u64) {
        WriterPool::remove_worker(self, id);
    }
}

/// A hybrid index, applied in place on the endpoint's thread: one engine's events in its order,
/// each with its group.
#[cfg(feature = "hybrid")]
pub(crate) struct Hybrid<H: crate::hybrid::HybridIndex + ?Sized>(pub(crate) crate::sync::Arc<H>);

#[cfg(feature = "hybrid")]
impl<H: crate::hybrid::HybridIndex + ?Sized + 'static> Sink for Hybrid<H> {
    type Item = (u32, Event);

    fn map(
        &self,
        mapper: &EventMapper,
        batch: &KvEventBatch,
        event_id: u64,
    ) -> Batch<(u32, Event)> {
        let mapped = mapper.map_groups(batch, event_id, self.0.model());
        Batch {
            items: mapped.events,
            filtered: mapped.filtered,
            rejected: mapped.rejected,
        }
    }

    /// A clear of the chain group clears every group of the worker.
    fn cleared(&self, worker: Worker, event_id: u64) -> (u32, Event) {
        (
            self.0.model().chain_group(),
            Event::cleared(worker, event_id),
        )
    }

    fn offer(&self, (group, event): (u32, Event)) -> Offer<(u32, Event)> {
        match self.0.apply(group, &event) {
            Ok(()) => Offer::Taken,
            Err(error) => verdict(group, &event, error),
        }
    }

    /// One [`apply_batch`](crate::hybrid::HybridIndex::apply_batch): the index publishes the
    /// batch's changes of each worker once.
    fn apply_all(
        &self,
        items: Vec<(u32, Event)>,
    ) -> Result<Vec<Offer<(u32, Event)>>, Vec<(u32, Event)>> {
        let results = self.0.apply_batch(&items).into_iter().zip(&items);
        let verdicts = results.map(|(result, (group, event))| match result {
            Ok(()) => Offer::Taken,
            Err(error) => verdict(*group, event, error),
        });
        Ok(verdicts.collect())
    }

    fn remove_worker(&self, id: u64) {
        self.0.remove_worker(id);
    }
}

/// What an index's error on `event` of `group` makes of it: a warning, or a refusal.
#[cfg(feature = "hybrid")]
fn verdict<T>(group: u32, event: &Event, error: crate::EventError) -> Offer<T> {
    if error.is_warning() {
        Offer::Warned(format!("{}: {error}", event.worker))
    } else {
        Offer::Refused(format!("{} group {group}: {error}", event.worker))
    }
}
