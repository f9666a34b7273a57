//! # The contract
//!
//! Every index of the crate — [`NaiveIndexer`](crate::NaiveIndexer), the reference, and each
//! layout behind [`Indexer`](crate::Indexer) — behaves exactly as this page says; the
//! differential tests and the fuzz target compare them with the reference on adversarial
//! inputs. (This is the crate's own wording of the project's specification.)
//!
//! ## Words
//!
//! - A **block** is a fixed number of tokens of one sequence (the engine's block size).
//! - Its **local hash** ([`LocalHash`](crate::LocalHash)) hashes the block's tokens and its
//!   **extra keys**, when it has some: each multimodal item whose placeholders overlap the
//!   block (identifier, and start relative to the block), the request's cache salt (first block
//!   only), a digest of the block's prompt embeddings, the tokens after the block when the
//!   engine hashes blocks over them (vLLM's lookahead hashing for speculative decoding), each
//!   tagged by kind ([`hash::ExtraKey`](crate::hash::ExtraKey)); the LoRA adapter seeds the
//!   hash. Two blocks
//!   with equal tokens and different extra keys are different blocks. A block without extra
//!   keys hashes its tokens alone, as before. The router computes it from a request's tokens and
//!   features ([`hash::local_hashes_with_features`](crate::hash::local_hashes_with_features)),
//!   the ingest from the engine's events.
//! - Its **sequence hash** ([`SeqHash`](crate::SeqHash)) is the engine's name for the block *and
//!   its whole prefix*. It is opaque: any engine's algorithm works, and the index only uses it as
//!   a handle (parents of stores, blocks of removes).
//! - A **worker** ([`Worker`](crate::Worker)) is one cache: one data-parallel rank of one engine.
//! - A block's **position** is its index in its sequence, 0 for the first.
//!
//! ## Events
//!
//! For every worker the index keeps a set of **held** blocks, each `seq -> (local, parent)`.
//!
//! - **Stored** `{ parent, blocks }` adds the blocks as a chain under `parent`, all or nothing.
//!   It is rejected with nothing changed — the first failing check is the error — when the
//!   worker does not hold `parent` ([`UnknownParent`](crate::EventError::UnknownParent)); when two
//!   blocks share a seq or a block's seq equals `parent`
//!   ([`InvalidSequence`](crate::EventError::InvalidSequence)); when the worker holds a block's
//!   seq with another local or parent ([`Conflict`](crate::EventError::Conflict)). Storing what
//!   is already held identically is a no-op, so replays are idempotent.
//! - **Removed** `{ blocks }` drops each listed seq, in order; seqs not held are ignored and
//!   reported as a warning ([`UnknownBlocks`](crate::EventError::UnknownBlocks)) after the rest is
//!   applied. Removing a block does **not** remove its descendants: they stay held, unreachable,
//!   and count again as soon as the block is stored again — under its old parent or a new one
//!   (its descendants follow it; re-stores may even close a cycle of parents, whose blocks are
//!   never reachable, and nothing loops).
//! - **Cleared** drops every block of the worker (that id and rank);
//!   [`remove_worker`](crate::KvIndex::remove_worker) drops every rank of an id.
//! - The event id is carried for the ingest layer's sequencing; indexes ignore it.
//!
//! No input of any kind panics an index, corrupts it, or leaks memory.
//!
//! ## Reachability and scores
//!
//! A held block is **reachable** when its parent is `None` or a reachable block: every reachable
//! block has a well-defined position, its parent's plus one.
//!
//! [`find_matches`](crate::KvIndex::find_matches) answers, for every worker, the largest `d`
//! such that the worker holds a chain `c_0 .. c_{d-1}` starting at a root, each block the child
//! of the one before, with `c_i.local == query[i]`. Workers at depth 0 are left out. So:
//! - **no over-count**: a worker that diverged earlier never scores past the divergence, even if
//!   it holds the same local hash at the same position under another prefix;
//! - **no under-count**: a hole stops a chain exactly there, and re-storing the missing block
//!   restores the full depth at once;
//! - **salted twins** — two held blocks with the same local under the same parent but different
//!   seqs — both count: removing one keeps the chain alive through the other;
//! - depth is bounded only by memory (chains of 100,000 blocks work in every layout), and so is
//!   the number of workers.
//!
//! ## Groups
//!
//! A model whose layers attend in several ways keeps one KV-cache **group** per kind, and a
//! prefix is reusable only if every group can supply it. The [`hybrid`](crate::hybrid) module
//! scores such models; a model with one full-attention group scores exactly as above.
//!
//! - A model is a list of groups, indexed by vLLM's `group_idx`, each a kind and a block size
//!   ([`ModelGroups`](crate::hybrid::ModelGroups)): **full attention**, **sliding window** of `W`
//!   tokens, **chunked local** attention in chunks of `C` tokens, **Mamba** (linear attention,
//!   state-space layers). It has at least one full-attention group, and every group has the same
//!   block size `B` (vLLM also allows multiples of a hash block size; not yet supported here, and
//!   refused, never guessed).
//! - The first full-attention group is the **chain group**. Its events are the events above:
//!   its held set, its reachability, its depth `D` for a query. Every other group holds a set of
//!   sequence hashes: a `Stored` adds its blocks' seqs (their parent and locals are not checked,
//!   since vLLM leaves the blocks a group skips out of its events but names the parent anyway),
//!   a `Removed` drops them (seqs the group did not hold are the usual warning). A `Cleared` of
//!   any group clears every group of the worker.
//! - Group `g` **holds the query's block `i`** when `i < D` and `g` holds the seq of a chain
//!   block at position `i` on a chain matching `query[..=i]` (with salted twins, any of them);
//!   the chain group holds exactly blocks `0 .. D`. A seq names one prefix, so a block of another
//!   group counts exactly where the chain group's block of the same seq is, and moves with it.
//! - A worker's score is the longest hit `h` (in blocks) that vLLM 0.33's
//!   `HybridKVCacheCoordinator.find_longest_cache_hit` computes with these `held` answers, every
//!   block of the query a candidate (`max_cache_hit_length` is the query's length: vLLM's
//!   recomputation of a prompt's last token is the router's business, not the index's). Groups
//!   of one kind are looked up together (a block counts if each of them holds it), full
//!   attention first; from `h = len(query)`, each kind in turn lowers `h`:
//!   - full attention: the run of held blocks from block 0, at most `h` (looked up once, then
//!     only trimmed);
//!   - sliding window: with `k = ceil((W - 1) / B)`, from block `h - 1` down, the first `k`
//!     consecutive held blocks ending at block `j` give `j + 1`; if no such run exists, the run
//!     of held blocks from block 0 (`SlidingWindowManager`, `_contiguous_blocks_for_hit`);
//!   - chunked local: with `s = floor(h * B / C) * C / B` (the last chunk's first block, blocks
//!     before it computed), `s` plus the run of held blocks from block `s`, at most `h`
//!     (`ChunkedLocalAttentionManager`);
//!   - Mamba: the last held block below `h`, `j`, gives `j + 1`; none gives 0
//!     (`MambaManager`);
//!
//!   and the round repeats until no kind lowers `h`, except with exactly two kinds of which the
//!   first is full attention (vLLM's "simple hybrid"), where one round is the answer. Workers
//!   scoring 0 are left out.
//!
//! ## Concurrency
//!
//! [`KvIndex::apply`](crate::KvIndex::apply) may be called from many threads. Events of different
//! workers apply concurrently and all take effect; events of one worker take effect in call
//! order when the calls are sequential, and concurrent calls for one worker leave the index in
//! some serial order, never corrupt. `find_matches` runs concurrently with everything and never
//! waits for a writer; a query that races writers may see their events partly applied, but never
//! reports a depth larger than the largest depth that worker had at some instant during the
//! query (**no phantom matches**).
//!
//! ## How the implementation keeps it
//!
//! **The reachable-only invariant.** A worker's slot is in a layout entry exactly while the
//! worker has a reachable block with that entry's key (position and canonical hash of the
//! chain). Since a reachable block's parent is reachable, a worker present at position `p` of a
//! query's chain is present at every position before: worker sets along a query shrink
//! monotonically, which is what makes jump search with binary scan-back exact. Every mutation
//! keeps the invariant at every instant, not only between events: a hole detaches the subtree
//! below it deepest first, a re-store attaches it shallowest first, so a racing query never sees
//! a deeper entry without the shallower ones (no phantoms).
//!
//! **The radix tree's memory invariants**, named by its `// SAFETY:` comments:
//! - **I1 (held nodes live)**: a node that holds a worker is linked; the core keeps a node's
//!   handle only while its worker is in the node, so the handle is live. The seam's methods that
//!   take a handle are `unsafe fn`s whose contract is I1, and only the core calls them.
//! - **I2 (parents outlive children)**: a node with a linked child is not unlinked, so a linked
//!   node's parent pointer is live.
//! - **I3 (pinned memory stays)**: a node reached while pinned stays allocated until the pin
//!   ends, even if unlinked meanwhile (`crossbeam-epoch` frees it only after every reader that
//!   could have loaded it has unpinned).
//!
//! **Worker slots** are reused only after every query that could have seen them has ended
//! (they return to the free list through the epoch), and a query reads slot names only through
//! a pinned guard, so a slot never names two workers within one query.
