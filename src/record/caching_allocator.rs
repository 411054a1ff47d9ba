//! A model of PyTorch's CUDA caching allocator, to predict what a GPU
//! reserves (`memory_reserved`) from a trace of allocations and frees
//! recorded anywhere (a CPU run's ledger or profiler events). The rules are
//! c10/cuda/CUDACachingAllocator.cpp's, with torch 2.x defaults (one stream,
//! no `max_split_size_mb`, no `roundup_power2_divisions`):
//!
//! - every request is rounded up to a multiple of 512 bytes;
//! - requests of at most 1 MiB come from the small pool, larger ones from
//!   the large pool;
//! - a request is served by the smallest cached free block of its pool that
//!   holds it (best fit, then the oldest segment, then the lowest offset);
//! - with none, a new segment is reserved: 2 MiB for a small request, 20 MiB
//!   for a request under 10 MiB, else the request rounded up to 2 MiB;
//! - a block larger than the request is split when what remains is at least
//!   512 bytes (small pool) or more than 1 MiB (large pool); otherwise the
//!   request gets the whole block (and `memory_allocated` counts all of it);
//! - a freed block stays cached, merged with free neighbours of its segment;
//!   segments are given back only when a new one would not fit under the
//!   capacity (the allocator then frees every wholly free segment and
//!   retries) or on `empty_cache`;
//! - with `expandable_segments:True` each pool is one segment that grows in
//!   2 MiB pages, so nothing is lost to segment sizes, only to pages.
//!
//! Pure: no device, no libtorch. The unit tests feed hand-made traces whose
//! reserved bytes follow from the rules above.
use std::collections::HashMap;

const MIN_BLOCK: u64 = 512;
const SMALL_SIZE: u64 = 1 << 20;
const SMALL_BUFFER: u64 = 2 << 20;
const LARGE_BUFFER: u64 = 20 << 20;
const MIN_LARGE_ALLOC: u64 = 10 << 20;
const ROUND_LARGE: u64 = 2 << 20;
const PAGE: u64 = 2 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pool {
    Small,
    Large,
}

impl Pool {
    fn of(bytes: u64) -> Pool {
        if bytes <= SMALL_SIZE {
            Pool::Small
        } else {
            Pool::Large
        }
    }

    /// Whether a free block of `remaining` bytes is worth splitting off.
    fn splits(self, remaining: u64) -> bool {
        match self {
            Pool::Small => remaining >= MIN_BLOCK,
            Pool::Large => remaining > SMALL_SIZE,
        }
    }
}

/// The allocator's rounding of a request.
pub fn round_size(bytes: u64) -> u64 {
    bytes.max(1).div_ceil(MIN_BLOCK) * MIN_BLOCK
}

/// The segment reserved for a rounded request no cached block holds.
pub fn segment_size(rounded: u64) -> u64 {
    if rounded <= SMALL_SIZE {
        SMALL_BUFFER
    } else if rounded < MIN_LARGE_ALLOC {
        LARGE_BUFFER
    } else {
        rounded.div_ceil(ROUND_LARGE) * ROUND_LARGE
    }
}

#[derive(Debug, Clone)]
struct Block {
    offset: u64,
    size: u64,
    /// The allocation it serves, or `None` when cached (free).
    id: Option<u64>,
}

#[derive(Debug, Clone)]
struct Segment {
    pool: Pool,
    size: u64,
    /// In address order, covering the segment.
    blocks: Vec<Block>,
}

/// An allocation the model could not place under the capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutOfMemory {
    pub requested_bytes: u64,
    pub reserved_bytes: u64,
}

/// The allocator's state and its counters, as `torch.cuda.memory_stats`
/// names them.
#[derive(Debug, Clone, Default)]
pub struct CachingAllocator {
    segments: Vec<Segment>,
    /// Where each live allocation is: (segment, block index is looked up by offset).
    live: HashMap<u64, (usize, u64)>,
    capacity: Option<u64>,
    expandable: bool,
    allocated: u64,
    peak_allocated: u64,
    reserved: u64,
    peak_reserved: u64,
    /// Times the allocator freed its cache to make room (`num_alloc_retries`).
    pub alloc_retries: u64,
}

impl CachingAllocator {
    /// The default allocator, unbounded (every segment fits).
    pub fn new() -> CachingAllocator {
        CachingAllocator::default()
    }

    /// At most `capacity` bytes reserved (the device's memory less what
    /// lives outside the allocator, or `per_process_memory_fraction`).
    pub fn with_capacity(mut self, capacity: u64) -> CachingAllocator {
        self.capacity = Some(capacity);
        self
    }

    /// `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`.
    pub fn expandable(mut self) -> CachingAllocator {
        self.expandable = true;
        self
    }

    /// Bytes in blocks handed out (`allocated_bytes.all.current`).
    pub fn allocated(&self) -> u64 {
        self.allocated
    }

    pub fn peak_allocated(&self) -> u64 {
        self.peak_allocated
    }

    /// Bytes the device has given the allocator (`reserved_bytes.all.current`).
    pub fn reserved(&self) -> u64 {
        self.reserved
    }

    pub fn peak_reserved(&self) -> u64 {
        self.peak_reserved
    }

    /// Starts a new peak from now (`reset_peak_memory_stats`).
    pub fn reset_peaks(&mut self) {
        self.peak_allocated = self.allocated;
        self.peak_reserved = self.reserved;
    }

    /// Serves allocation `id` of `bytes`. An id still live is freed first
    /// (a trace that reuses an address after a free it did not log).
    pub fn alloc(&mut self, id: u64, bytes: u64) -> Result<(), OutOfMemory> {
        if self.live.contains_key(&id) {
            self.free(id);
        }
        let size = round_size(bytes);
        let pool = Pool::of(size);
        let (segment, offset) = match self.best_fit(pool, size) {
            Some(found) => found,
            None => self.grow(pool, size)?,
        };
        self.take(segment, offset, size, id);
        self.live.insert(id, (segment, offset));
        Ok(())
    }

    /// Returns allocation `id` to the cache; an unknown id is ignored (it
    /// was live before the trace began).
    pub fn free(&mut self, id: u64) {
        let Some((s, offset)) = self.live.remove(&id) else { return };
        let blocks = &mut self.segments[s].blocks;
        let Some(i) = blocks.iter().position(|b| b.offset == offset) else { return };
        self.allocated -= blocks[i].size;
        blocks[i].id = None;
        // Merge with a free next block, then with a free previous one.
        if i + 1 < blocks.len() && blocks[i + 1].id.is_none() {
            let next = blocks.remove(i + 1);
            blocks[i].size += next.size;
        }
        if i > 0 && blocks[i - 1].id.is_none() {
            let this = blocks.remove(i);
            blocks[i - 1].size += this.size;
        }
    }

    /// Gives every wholly free segment back to the device (`empty_cache`).
    pub fn empty_cache(&mut self) {
        let mut kept = Vec::new();
        let mut moved = HashMap::new();
        for (old, segment) in std::mem::take(&mut self.segments).into_iter().enumerate() {
            if segment.blocks.iter().all(|b| b.id.is_none()) {
                self.reserved -= segment.size;
            } else {
                moved.insert(old, kept.len());
                kept.push(segment);
            }
        }
        self.segments = kept;
        for place in self.live.values_mut() {
            place.0 = moved[&place.0];
        }
    }

    /// The smallest free block of `pool` that holds `size`: (segment, offset).
    fn best_fit(&self, pool: Pool, size: u64) -> Option<(usize, u64)> {
        self.segments
            .iter()
            .enumerate()
            .filter(|(_, s)| s.pool == pool)
            .flat_map(|(i, s)| s.blocks.iter().map(move |b| (i, b)))
            .filter(|(_, b)| b.id.is_none() && b.size >= size)
            .min_by_key(|(i, b)| (b.size, *i, b.offset))
            .map(|(i, b)| (i, b.offset))
    }

    /// Reserves room for `size` in `pool`: a new segment, or with
    /// expandable segments more pages at the end of the pool's one segment.
    /// Over the capacity, frees the cache once and tries again.
    fn grow(&mut self, pool: Pool, size: u64) -> Result<(usize, u64), OutOfMemory> {
        let mut bytes = self.growth(pool, size);
        if !self.fits(bytes) {
            self.alloc_retries += 1;
            self.empty_cache();
            bytes = self.growth(pool, size);
            if !self.fits(bytes) {
                return Err(OutOfMemory { requested_bytes: size, reserved_bytes: self.reserved });
            }
        }
        self.reserved += bytes;
        self.peak_reserved = self.peak_reserved.max(self.reserved);
        match (self.expandable, self.expandable_segment(pool)) {
            (true, Some(s)) => {
                let segment = &mut self.segments[s];
                let start = segment.size;
                segment.size += bytes;
                match segment.blocks.last_mut().filter(|b| b.id.is_none()) {
                    Some(tail) => tail.size += bytes,
                    None => segment.blocks.push(Block { offset: start, size: bytes, id: None }),
                }
                let tail = segment.blocks.last().map_or(start, |b| b.offset);
                Ok((s, tail))
            }
            _ => {
                self.segments.push(Segment {
                    pool,
                    size: bytes,
                    blocks: vec![Block { offset: 0, size: bytes, id: None }],
                });
                Ok((self.segments.len() - 1, 0))
            }
        }
    }

    /// Replays one step of a trace recorded elsewhere and returns its peak
    /// reserved bytes: first the allocations live when the step began
    /// (`(address, bytes)`: any the model does not hold are allocated, any
    /// it holds that are gone are freed, so allocations made between logged
    /// steps are kept in step), then the step's events in order
    /// (`(address, bytes)`, a negative size a free).
    pub fn replay_step(
        &mut self,
        live: impl IntoIterator<Item = (u64, u64)>,
        events: impl IntoIterator<Item = (u64, i64)>,
    ) -> Result<u64, OutOfMemory> {
        let live: HashMap<u64, u64> = live.into_iter().collect();
        let gone: Vec<u64> = self.live.keys().filter(|id| !live.contains_key(id)).copied().collect();
        for id in gone {
            self.free(id);
        }
        let mut new: Vec<(u64, u64)> = live.into_iter().filter(|(id, _)| !self.live.contains_key(id)).collect();
        new.sort_unstable();
        for (id, bytes) in new {
            self.alloc(id, bytes)?;
        }
        self.reset_peaks();
        for (id, size) in events {
            if size >= 0 {
                self.alloc(id, size as u64)?;
            } else {
                self.free(id);
            }
        }
        Ok(self.peak_reserved)
    }

    /// The bytes to reserve for `size` more in `pool`: a new segment, or an
    /// expandable segment's pages past its free tail.
    fn growth(&self, pool: Pool, size: u64) -> u64 {
        match (self.expandable, self.expandable_segment(pool)) {
            (true, Some(s)) => {
                let tail = self.segments[s].blocks.last().filter(|b| b.id.is_none()).map_or(0, |b| b.size);
                (size - tail.min(size)).div_ceil(PAGE) * PAGE
            }
            (true, None) => size.div_ceil(PAGE) * PAGE,
            (false, _) => segment_size(size),
        }
    }

    /// Whether `bytes` more can be reserved under the capacity.
    fn fits(&self, bytes: u64) -> bool {
        self.capacity.is_none_or(|c| self.reserved + bytes <= c)
    }

    fn expandable_segment(&self, pool: Pool) -> Option<usize> {
        self.segments.iter().position(|s| s.pool == pool)
    }

    /// Hands out `size` bytes of the free block at `offset`, splitting off
    /// the rest when the pool's rule says so.
    fn take(&mut self, s: usize, offset: u64, size: u64, id: u64) {
        let segment = &mut self.segments[s];
        let pool = segment.pool;
        let i = segment.blocks.iter().position(|b| b.offset == offset).expect("best_fit or grow found this block");
        let remaining = segment.blocks[i].size - size;
        // An expandable segment's pages are never wasted on a whole block.
        if pool.splits(remaining) || (self.expandable && remaining > 0) {
            segment.blocks[i].size = size;
            segment.blocks.insert(i + 1, Block { offset: offset + size, size: remaining, id: None });
        }
        segment.blocks[i].id = Some(id);
        self.allocated += segment.blocks[i].size;
        self.peak_allocated = self.peak_allocated.max(self.allocated);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn requests_round_to_512_bytes_and_segments_follow_the_request_size() {
        assert_eq!([1, 512, 513, 4000].map(round_size), [512, 512, 1024, 4096]);
        assert_eq!(segment_size(512), 2 * MIB);
        assert_eq!(segment_size(MIB), 2 * MIB);
        assert_eq!(segment_size(MIB + 512), 20 * MIB);
        assert_eq!(segment_size(10 * MIB - 512), 20 * MIB);
        assert_eq!(segment_size(10 * MIB), 10 * MIB);
        assert_eq!(segment_size(15 * MIB + 1), 16 * MIB);
    }

    #[test]
    fn small_requests_share_one_2_mib_segment() {
        let mut a = CachingAllocator::new();
        a.alloc(1, 100).unwrap();
        assert_eq!((a.allocated(), a.reserved()), (512, 2 * MIB));
        // 600 KiB three times: each split from the same segment (the rest >= 512 B).
        for id in 2..=4 {
            a.alloc(id, 600 << 10).unwrap();
        }
        assert_eq!(a.reserved(), 2 * MIB);
        // A fourth does not fit what is left (2048 KiB - 512 B - 1800 KiB): a second segment.
        a.alloc(5, 600 << 10).unwrap();
        assert_eq!(a.reserved(), 4 * MIB);
    }

    #[test]
    fn a_mid_sized_request_reserves_20_mib_and_a_remainder_of_1_mib_is_not_split() {
        let mut a = CachingAllocator::new();
        a.alloc(1, 4 * MIB).unwrap();
        assert_eq!((a.allocated(), a.reserved()), (4 * MIB, 20 * MIB));
        // 15 MiB into the 16 MiB left: 1 MiB would remain, not more than 1 MiB, so no split.
        a.alloc(2, 15 * MIB).unwrap();
        assert_eq!((a.allocated(), a.reserved()), (20 * MIB, 20 * MIB));
        // 12 MiB: nothing cached holds it; a segment of its own size.
        a.alloc(3, 12 * MIB).unwrap();
        assert_eq!(a.reserved(), 32 * MIB);
    }

    #[test]
    fn freed_blocks_stay_cached_and_a_repeated_step_reserves_nothing_more() {
        let step = |a: &mut CachingAllocator| {
            a.alloc(10, 3 * MIB).unwrap();
            a.alloc(11, 5 * MIB).unwrap();
            a.free(10);
            a.alloc(12, 30 * MIB).unwrap();
            a.free(11);
            a.free(12);
        };
        let mut a = CachingAllocator::new();
        step(&mut a);
        let after_one = a.reserved();
        assert_eq!((after_one, a.allocated()), (20 * MIB + 30 * MIB, 0));
        step(&mut a);
        assert_eq!((a.reserved(), a.peak_reserved()), (after_one, after_one));
    }

    #[test]
    fn a_hole_between_live_blocks_is_fragmentation_that_costs_a_new_segment() {
        let mut a = CachingAllocator::new();
        a.alloc(1, 8 * MIB).unwrap(); // segment 1 (20 MiB): 8 used, 12 free
        a.alloc(2, 8 * MIB).unwrap(); // 8 + 8 used, 4 free
        a.free(1); // free 8 MiB, then the live 8 MiB, then free 4 MiB: no merge
        assert_eq!(a.allocated(), 8 * MIB);
        a.alloc(3, 9 * MIB).unwrap(); // neither hole holds 9 MiB: another 20 MiB
        assert_eq!(a.reserved(), 40 * MIB);
        // Freed neighbours merge: with 2 gone, segment 1 is one free 20 MiB block again.
        a.free(2);
        a.alloc(4, 18 * MIB).unwrap();
        assert_eq!(a.reserved(), 40 * MIB);
    }

    #[test]
    fn at_the_capacity_the_cache_is_freed_once_and_then_it_is_out_of_memory() {
        let mut a = CachingAllocator::new().with_capacity(50 * MIB);
        a.alloc(1, 30 * MIB).unwrap();
        a.free(1); // 30 MiB cached, nothing live
        a.alloc(2, 40 * MIB).unwrap(); // 30 + 40 > 50: the cache goes, then 40 fits
        assert_eq!((a.reserved(), a.alloc_retries), (40 * MIB, 1));
        let oom = a.alloc(3, 12 * MIB).unwrap_err();
        assert_eq!(oom, OutOfMemory { requested_bytes: 12 * MIB, reserved_bytes: 40 * MIB });
        assert_eq!(a.alloc_retries, 2);
    }

    #[test]
    fn expandable_segments_grow_by_pages_and_lose_nothing_to_segment_sizes() {
        let mut a = CachingAllocator::new().expandable();
        a.alloc(1, 4 * MIB).unwrap();
        assert_eq!(a.reserved(), 4 * MIB, "two pages, not a 20 MiB segment");
        a.alloc(2, 3 * MIB).unwrap();
        assert_eq!(a.reserved(), 8 * MIB, "4 + 3 MiB in 2 MiB pages");
        a.free(2);
        a.alloc(3, 12 * MIB).unwrap(); // the 4 MiB free tail grows by 8 MiB
        assert_eq!(a.reserved(), 16 * MIB);
        let mut default = CachingAllocator::new();
        for (id, bytes) in [(1, 4 * MIB), (2, 3 * MIB)] {
            default.alloc(id, bytes).unwrap();
        }
        default.free(2);
        default.alloc(3, 12 * MIB).unwrap();
        assert_eq!(default.reserved(), 20 * MIB, "one 20 MiB segment, 4 MiB of it never used");
    }

    #[test]
    fn a_replayed_step_reconciles_its_baseline_and_reports_its_peak_reserved() {
        let mut a = CachingAllocator::new();
        // Step 1: 4 MiB of weights live (a 20 MiB segment), then an 18 MiB
        // activation made and freed (16 MiB free does not hold it: a segment of its own).
        let act = 18 * MIB as i64;
        let peak = a.replay_step([(1, 4 * MIB)], [(2, act), (2, -act)]).unwrap();
        assert_eq!(peak, 20 * MIB + 18 * MIB);
        // Step 2: the weights, plus 1 MiB made between the steps (not in any
        // step's events, only in the baseline: a small 2 MiB segment); the
        // activation's cached 18 MiB is reused: nothing more for it.
        let peak = a.replay_step([(1, 4 * MIB), (3, MIB)], [(4, act), (4, -act)]).unwrap();
        assert_eq!((peak, a.allocated()), (40 * MIB, 4 * MIB + MIB));
        // Step 3: the 1 MiB is gone from the baseline, so it is freed.
        a.replay_step([(1, 4 * MIB)], []).unwrap();
        assert_eq!(a.allocated(), 4 * MIB);
    }

    #[test]
    fn peaks_follow_the_counters_and_reset_to_the_present() {
        let mut a = CachingAllocator::new();
        a.alloc(1, 25 * MIB).unwrap();
        a.free(1);
        // 25 MiB reserves 26 MiB (2 MiB rounding); the 1 MiB left is not split
        // off, so the block, and `memory_allocated`, is all 26 MiB.
        assert_eq!((a.peak_allocated(), a.peak_reserved()), (26 * MIB, 26 * MIB));
        a.reset_peaks();
        assert_eq!((a.peak_allocated(), a.peak_reserved()), (0, 26 * MIB), "the segment stays cached");
        a.free(99); // live before the trace began: ignored
        assert_eq!(a.allocated(), 0);
    }
}
