//! A device's registration cache, shared by all its comms: page-granular, reference-counted ranges
//! registered once and released at refcount 0 (net_ib's ncclIbMrCache, pure logic, no verbs here).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::{NetError, NetResult};

/// A page-aligned range: what is actually registered for a request of (addr, len).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PageRange {
    /// First byte, aligned down to the page.
    pub start: usize,
    /// Whole pages covering [addr, addr+len).
    pub pages: usize,
    pub page: usize,
}

impl PageRange {
    /// The pages covering `[addr, addr+len)`, as net_ib's ncclIbRegMrDmaBufInternal computes them
    /// (NCCL 2.28.3 src/transport/net_ib.cc: `addr = data & -pageSize`, pages rounded up).
    /// `len` 0, a page size that is not a power of two, or a range past the address space is an
    /// error naming the request.
    pub(crate) fn of(addr: usize, len: usize, page: usize) -> Result<PageRange, String> {
        if !page.is_power_of_two() {
            return Err(format!("page size {page} is not a power of two"));
        }
        if len == 0 {
            return Err(format!("cannot register 0 bytes at {addr:#x}"));
        }
        let end = addr
            .checked_add(len)
            .and_then(|e| e.checked_add(page - 1))
            .ok_or_else(|| format!("range {addr:#x}+{len} wraps the address space"))?;
        let start = addr & !(page - 1);
        Ok(PageRange {
            start,
            pages: ((end & !(page - 1)) - start) / page,
            page,
        })
    }

    pub(crate) fn bytes(&self) -> usize {
        self.pages * self.page
    }

    fn end(&self) -> usize {
        self.start + self.bytes()
    }

    fn contains(&self, other: &PageRange) -> bool {
        other.start >= self.start && other.end() <= self.end()
    }
}

/// How `acquire` served a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// An existing entry covers the pages: its reference count went up.
    Hit,
    /// Nothing covered them: they were registered as a new entry.
    Registered,
}

/// What `release` did with the entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// Other users remain (this many references).
    Kept(usize),
    /// That was the last reference: the entry left the cache (the region is dropped with the
    /// caller's last Arc).
    Removed,
}

/// Counters since creation (relaxed atomics; for tests and logs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CacheStats {
    pub registrations: u64,
    pub hits: u64,
    pub removals: u64,
    /// Entries in the cache now.
    pub entries: usize,
}

struct Entry<R> {
    range: PageRange,
    refs: usize,
    region: Arc<R>,
}

/// The cache of one device. Entries are kept sorted by start address; a request is served by the
/// first entry whose pages contain its pages, else registered as a new entry (a range that only
/// overlaps or extends an existing one gets its own registration, as in net_ib, and the old entry
/// lives on until its users release it).
pub struct RegCache<R> {
    page: usize,
    entries: Mutex<Vec<Entry<R>>>,
    registrations: AtomicU64,
    hits: AtomicU64,
    removals: AtomicU64,
}

impl<R> RegCache<R> {
    /// An empty cache for `page`-byte pages.
    pub fn new(page: usize) -> RegCache<R> {
        RegCache {
            page,
            entries: Mutex::new(Vec::new()),
            registrations: AtomicU64::new(0),
            hits: AtomicU64::new(0),
            removals: AtomicU64::new(0),
        }
    }

    /// A cache with the system page size (sysconf(_SC_PAGESIZE), as net_ib).
    pub(crate) fn with_system_page() -> RegCache<R> {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        RegCache::new(usize::try_from(page).unwrap_or(4096).max(1))
    }

    pub fn page(&self) -> usize {
        self.page
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Entry<R>>> {
        match self.entries.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// The region covering `[addr, addr+len)`: a cached one (refcount + 1) or a new one from
    /// `register(pages)`. The lock is held while registering, so two threads asking for the same
    /// pages register them once (net_ib holds the device mutex the same way). A failed
    /// registration leaves the cache unchanged.
    pub(crate) fn acquire<E>(
        &self,
        addr: usize,
        len: usize,
        register: impl FnOnce(PageRange) -> Result<R, E>,
    ) -> Result<(Arc<R>, Lookup), E>
    where
        E: From<String>,
    {
        let want = PageRange::of(addr, len, self.page)?;
        let mut entries = self.lock();
        if let Some(e) = entries.iter_mut().find(|e| e.range.contains(&want)) {
            e.refs += 1;
            self.hits.fetch_add(1, Ordering::Relaxed);
            return Ok((Arc::clone(&e.region), Lookup::Hit));
        }
        let region = Arc::new(register(want)?);
        let at = entries.partition_point(|e| e.range.start <= want.start);
        entries.insert(
            at,
            Entry {
                range: want,
                refs: 1,
                region: Arc::clone(&region),
            },
        );
        self.registrations.fetch_add(1, Ordering::Relaxed);
        Ok((region, Lookup::Registered))
    }

    /// Drops one reference to the entry holding `region`; at zero the entry leaves the cache.
    /// An internal error when no entry holds it (released twice, or never acquired here).
    pub fn release(&self, region: &Arc<R>) -> NetResult<Release> {
        let mut entries = self.lock();
        let Some(i) = entries.iter().position(|e| Arc::ptr_eq(&e.region, region)) else {
            return Err(NetError::internal(format!(
                "registration not found in this device's cache of {} entries (released twice?)",
                entries.len()
            )));
        };
        entries[i].refs -= 1;
        if entries[i].refs > 0 {
            return Ok(Release::Kept(entries[i].refs));
        }
        let gone = entries.remove(i);
        self.removals.fetch_add(1, Ordering::Relaxed);
        // the entry's Arc goes here, outside no lock ordering concerns: the caller still holds
        // its own, so the region itself is dropped when the caller lets go of it
        drop(entries);
        drop(gone);
        Ok(Release::Removed)
    }

    pub fn stats(&self) -> CacheStats {
        CacheStats {
            registrations: self.registrations.load(Ordering::Relaxed),
            hits: self.hits.load(Ordering::Relaxed),
            removals: self.removals.load(Ordering::Relaxed),
            entries: self.lock().len(),
        }
    }

    /// (start, pages, refs) of every entry in address order (tests, diagnostics).
    pub fn snapshot(&self) -> Vec<(usize, usize, usize)> {
        self.lock()
            .iter()
            .map(|e| (e.range.start, e.range.pages, e.refs))
            .collect()
    }
}

#[cfg(test)]
mod tests;
