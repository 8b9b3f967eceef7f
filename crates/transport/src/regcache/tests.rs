//! Unit tests of the registration cache: page rounding, overlap, growth, reference counts down to
//! exactly one deregistration, failed registrations, and concurrent use from several threads.

use super::*;
use std::sync::atomic::AtomicUsize;

const PAGE: usize = 4096;

/// A fake region: counts its registrations and deregistrations (drops) in shared counters.
struct Fake {
    range: PageRange,
    dropped: Arc<AtomicUsize>,
}

impl Drop for Fake {
    fn drop(&mut self) {
        self.dropped.fetch_add(1, Ordering::SeqCst);
    }
}

struct Rig {
    cache: RegCache<Fake>,
    registered: Arc<AtomicUsize>,
    dropped: Arc<AtomicUsize>,
}

impl Rig {
    fn new() -> Rig {
        Rig {
            cache: RegCache::new(PAGE),
            registered: Arc::new(AtomicUsize::new(0)),
            dropped: Arc::new(AtomicUsize::new(0)),
        }
    }

    fn get(&self, addr: usize, len: usize) -> (Arc<Fake>, Lookup) {
        let (registered, dropped) = (Arc::clone(&self.registered), Arc::clone(&self.dropped));
        self.cache
            .acquire::<String>(addr, len, move |range| {
                registered.fetch_add(1, Ordering::SeqCst);
                Ok(Fake { range, dropped })
            })
            .expect("acquire")
    }

    fn put(&self, r: Arc<Fake>) -> Release {
        let rel = self.cache.release(&r).expect("release");
        drop(r);
        rel
    }

    fn counts(&self) -> (usize, usize) {
        (
            self.registered.load(Ordering::SeqCst),
            self.dropped.load(Ordering::SeqCst),
        )
    }
}

#[test]
fn page_range_rounds_out_to_whole_pages() {
    let r = PageRange::of(0x1000, 1, PAGE).unwrap();
    assert_eq!((r.start, r.pages, r.bytes()), (0x1000, 1, 4096));
    let r = PageRange::of(0x1fff, 2, PAGE).unwrap();
    assert_eq!((r.start, r.pages), (0x1000, 2), "straddles a page boundary");
    let r = PageRange::of(0x1234, 3 * PAGE, PAGE).unwrap();
    assert_eq!((r.start, r.pages), (0x1000, 4));
    assert_eq!(
        PageRange::of(0x1000, 0, PAGE).unwrap_err(),
        "cannot register 0 bytes at 0x1000"
    );
    assert_eq!(
        PageRange::of(usize::MAX - 10, 100, PAGE).unwrap_err(),
        format!("range {:#x}+100 wraps the address space", usize::MAX - 10)
    );
    assert_eq!(
        PageRange::of(0, 1, 3000).unwrap_err(),
        "page size 3000 is not a power of two"
    );
}

#[test]
fn sub_ranges_hit_the_registration_of_the_whole_buffer() {
    // ncclCommRegister: the whole buffer once, then regMr/deregMr of pieces around each use
    let rig = Rig::new();
    let (whole, l) = rig.get(0x10_0000, 64 * PAGE);
    assert_eq!(l, Lookup::Registered);
    assert_eq!(
        whole.range,
        PageRange::of(0x10_0000, 64 * PAGE, PAGE).unwrap()
    );
    for i in 0..100usize {
        let off = (i * 7919) % (60 * PAGE);
        let (piece, l) = rig.get(0x10_0000 + off, 3 * PAGE);
        assert_eq!(l, Lookup::Hit, "piece at offset {off}");
        assert!(Arc::ptr_eq(&piece, &whole));
        assert_eq!(rig.put(piece), Release::Kept(1));
    }
    assert_eq!(rig.counts(), (1, 0), "one registration, none dropped");
    assert_eq!(
        rig.cache.stats(),
        CacheStats {
            registrations: 1,
            hits: 100,
            removals: 0,
            entries: 1
        }
    );
    assert_eq!(rig.put(whole), Release::Removed);
    assert_eq!(rig.counts(), (1, 1));
    assert_eq!(rig.cache.stats().entries, 0);
}

#[test]
fn overlapping_ranges_that_are_not_contained_register_their_own_pages() {
    let rig = Rig::new();
    let (a, _) = rig.get(0x10000, 2 * PAGE); // pages 0x10000..0x12000
    let (b, l) = rig.get(0x11000, 2 * PAGE); // pages 0x11000..0x13000: overlaps, not inside
    assert_eq!(l, Lookup::Registered);
    assert!(!Arc::ptr_eq(&a, &b));
    assert_eq!(
        rig.cache.snapshot(),
        vec![(0x10000, 2, 1), (0x11000, 2, 1)],
        "sorted by start"
    );
    // the shared page is served by the first entry that contains it
    let (c, l) = rig.get(0x11800, 16);
    assert_eq!(l, Lookup::Hit);
    assert!(Arc::ptr_eq(&c, &a));
    // a range inside b only
    let (d, l) = rig.get(0x12010, 16);
    assert_eq!(l, Lookup::Hit);
    assert!(Arc::ptr_eq(&d, &b));
    assert_eq!(rig.cache.snapshot(), vec![(0x10000, 2, 2), (0x11000, 2, 2)]);
    for r in [c, d, a, b] {
        rig.put(r);
    }
    assert_eq!(rig.counts(), (2, 2));
}

#[test]
fn growth_registers_the_larger_range_and_later_requests_hit_it() {
    let rig = Rig::new();
    let (small, _) = rig.get(0x40000, PAGE);
    // the same start, grown to 4 pages: not covered, so registered anew
    let (big, l) = rig.get(0x40000, 4 * PAGE);
    assert_eq!(l, Lookup::Registered);
    assert_eq!(big.range.pages, 4);
    assert_eq!(rig.cache.snapshot(), vec![(0x40000, 1, 1), (0x40000, 4, 1)]);
    // the small entry goes away with its last user; the grown one serves what follows
    assert_eq!(rig.put(small), Release::Removed);
    assert_eq!(rig.counts(), (2, 1));
    let (inner, l) = rig.get(0x40000, 2 * PAGE);
    assert_eq!(l, Lookup::Hit);
    assert!(Arc::ptr_eq(&inner, &big));
    rig.put(inner);
    assert_eq!(rig.put(big), Release::Removed);
    assert_eq!(rig.counts(), (2, 2));
    assert_eq!(rig.cache.snapshot(), vec![]);
}

#[test]
fn refcount_to_zero_deregisters_exactly_once() {
    let rig = Rig::new();
    let handles: Vec<_> = (0..5).map(|_| rig.get(0x8000, 100).0).collect();
    assert_eq!(rig.counts(), (1, 0));
    assert_eq!(rig.cache.snapshot(), vec![(0x8000, 1, 5)]);
    let mut it = handles.into_iter();
    for left in (1..5).rev() {
        assert_eq!(rig.put(it.next().unwrap()), Release::Kept(left));
        assert_eq!(rig.counts(), (1, 0), "still {left} users: not deregistered");
    }
    let last = it.next().unwrap();
    let extra = Arc::clone(&last);
    assert_eq!(rig.cache.release(&last), Ok(Release::Removed));
    // a second release of the same region is refused and changes nothing
    let err = rig.cache.release(&extra).unwrap_err();
    assert_eq!(
        err,
        NetError::internal(
            "registration not found in this device's cache of 0 entries (released twice?)"
        )
    );
    drop(last);
    assert_eq!(rig.counts(), (1, 0), "the caller's Arc still holds it");
    drop(extra);
    assert_eq!(
        rig.counts(),
        (1, 1),
        "dropped exactly once, with the last Arc"
    );
    assert_eq!(rig.cache.stats().removals, 1);
}

#[test]
fn failed_registration_leaves_the_cache_unchanged() {
    let cache: RegCache<u32> = RegCache::new(PAGE);
    let err = cache
        .acquire(0x1000, 10, |_| Err::<u32, String>("ENOMEM".to_string()))
        .unwrap_err();
    assert_eq!(err, "ENOMEM");
    assert_eq!(cache.stats(), CacheStats::default());
    let err = cache
        .acquire(0x1000, 0, |_| Ok::<u32, String>(1))
        .unwrap_err();
    assert_eq!(err, "cannot register 0 bytes at 0x1000");
    let (r, l) = cache.acquire(0x1000, 10, |_| Ok::<u32, String>(7)).unwrap();
    assert_eq!((*r, l), (7, Lookup::Registered));
}

#[test]
fn concurrent_comms_share_one_registration() {
    // 8 threads (comms on NCCL's proxy threads) pair regMr/deregMr of pieces of one buffer that
    // was registered first (ncclCommRegister): every request hits, nothing is registered again
    const THREADS: usize = 8;
    const ROUNDS: usize = 2000;
    let rig = Arc::new(Rig::new());
    let (anchor, _) = rig.get(0x100_0000, 256 * PAGE);
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let rig = Arc::clone(&rig);
            std::thread::spawn(move || {
                let mut hits = 0;
                for i in 0..ROUNDS {
                    let off = ((t * ROUNDS + i) * 4099) % (250 * PAGE);
                    let (r, l) = rig.get(0x100_0000 + off, 5 * PAGE);
                    hits += usize::from(l == Lookup::Hit);
                    rig.put(r);
                }
                hits
            })
        })
        .collect();
    let hits: usize = workers.into_iter().map(|w| w.join().unwrap()).sum();
    assert_eq!(hits, THREADS * ROUNDS);
    assert_eq!(rig.counts(), (1, 0));
    assert_eq!(rig.cache.snapshot(), vec![(0x100_0000, 256, 1)]);
    rig.put(anchor);
    assert_eq!(rig.counts(), (1, 1));
}

#[test]
fn concurrent_shared_and_private_ranges_keep_exact_counts() {
    // 4 held ranges every thread hits, plus one private range per thread registered and
    // removed every round: each registration is dropped exactly once
    const THREADS: usize = 6;
    const ROUNDS: usize = 1500;
    let rig = Arc::new(Rig::new());
    let held: Vec<_> = (0..4)
        .map(|k| rig.get(0x200_0000 + k * 16 * PAGE, 8 * PAGE).0)
        .collect();
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let rig = Arc::clone(&rig);
            std::thread::spawn(move || {
                for i in 0..ROUNDS {
                    let k = (t + i) % 4;
                    let (r, l) = rig.get(0x200_0000 + k * 16 * PAGE + (i % 8) * 64, 4 * PAGE);
                    assert_eq!(l, Lookup::Hit);
                    rig.put(r);
                    // a range of its own, never shared: registered and dropped every round
                    let own = 0x800_0000 + t * 64 * PAGE;
                    let (r, l) = rig.get(own, PAGE);
                    assert_eq!(l, Lookup::Registered);
                    assert_eq!(rig.put(r), Release::Removed);
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let own = THREADS * ROUNDS;
    assert_eq!(rig.counts(), (4 + own, own));
    assert_eq!(
        rig.cache.stats(),
        CacheStats {
            registrations: (4 + own) as u64,
            hits: own as u64,
            removals: own as u64,
            entries: 4
        }
    );
    for r in held {
        assert_eq!(rig.put(r), Release::Removed);
    }
    assert_eq!(rig.counts(), (4 + own, 4 + own));
}
