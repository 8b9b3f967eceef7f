//! Owned verbs resources: protection domain, completion queue and memory regions (raw or backed
//! by an owned page-aligned buffer), each keeping its parent alive and releasing itself on drop.

use super::completion::{WorkCompletion, POLL_BATCH};
use super::device::Context;
use super::error::{Result, VerbsError};
use super::sys as ib;
use std::alloc::{self, Layout};
use std::mem::MaybeUninit;
use std::ptr::NonNull;
use std::sync::Arc;

/// A protection domain (`ibv_pd`).
pub struct ProtectionDomain {
    raw: NonNull<ib::ibv_pd>,
    ctx: Arc<Context>,
    /// Register memory with IBV_ACCESS_RELAXED_ORDERING (through ibv_reg_mr_iova2).
    relaxed_ordering: bool,
}

// SAFETY: verbs objects may be used from any thread; the PD holds no Rust-side mutable state.
unsafe impl Send for ProtectionDomain {}
// SAFETY: as above.
unsafe impl Sync for ProtectionDomain {}

impl ProtectionDomain {
    /// A PD whose memory regions use plain access flags.
    pub fn new(ctx: &Arc<Context>) -> Result<Arc<Self>> {
        Self::with_relaxed_ordering(ctx, false)
    }

    /// A PD whose memory regions add IBV_ACCESS_RELAXED_ORDERING when `relaxed` (fails when
    /// libibverbs lacks ibv_reg_mr_iova2, which that flag needs).
    pub(crate) fn with_relaxed_ordering(ctx: &Arc<Context>, relaxed: bool) -> Result<Arc<Self>> {
        let v = ctx.verbs();
        if relaxed && v.reg_mr_iova2.is_none() {
            return Err(VerbsError::Library(ib::LoadError::MissingSymbol {
                symbol: "ibv_reg_mr_iova2",
                version: "IBVERBS_1.8",
                detail: "needed for NCCL_IB_PCI_RELAXED_ORDERING=1".to_string(),
            }));
        }
        // SAFETY: live context.
        let raw = unsafe { (v.alloc_pd)(ctx.as_ptr()) };
        let raw =
            NonNull::new(raw).ok_or_else(|| VerbsError::last_os("ibv_alloc_pd", ctx.name()))?;
        Ok(Arc::new(ProtectionDomain {
            raw,
            ctx: Arc::clone(ctx),
            relaxed_ordering: relaxed,
        }))
    }

    /// True when regions of this PD are registered with relaxed ordering.
    pub fn relaxed_ordering(&self) -> bool {
        self.relaxed_ordering
    }

    pub fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    pub(crate) fn as_ptr(&self) -> *mut ib::ibv_pd {
        self.raw.as_ptr()
    }
}

impl Drop for ProtectionDomain {
    fn drop(&mut self) {
        // SAFETY: QPs and MRs hold an Arc to this PD, so none is alive; freed exactly once.
        unsafe {
            (self.ctx.verbs().dealloc_pd)(self.raw.as_ptr());
        }
    }
}

/// A completion queue (`ibv_cq`), polled without blocking.
pub struct CompletionQueue {
    raw: NonNull<ib::ibv_cq>,
    ctx: Arc<Context>,
    depth: u32,
    /// `ctx->ops.poll_cq`, read once at creation (the provider never changes it).
    poll_fn: ib::PollCqFn,
}

// SAFETY: libibverbs providers serialise CQ access internally; polling from several threads is
// allowed (each completion is handed out once).
unsafe impl Send for CompletionQueue {}
// SAFETY: as above.
unsafe impl Sync for CompletionQueue {}

impl CompletionQueue {
    /// Creates a CQ with room for at least `depth` completions.
    pub fn new(ctx: &Arc<Context>, depth: u32) -> Result<Arc<Self>> {
        let cqe = i32::try_from(depth.max(1))
            .map_err(|_| VerbsError::invalid(format!("CQ depth {depth} too large")))?;
        // SAFETY: live context; no completion channel, no CQ context pointer.
        let raw = unsafe {
            (ctx.verbs().create_cq)(
                ctx.as_ptr(),
                cqe,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
            )
        };
        let raw =
            NonNull::new(raw).ok_or_else(|| VerbsError::last_os("ibv_create_cq", ctx.name()))?;
        // SAFETY: a created CQ points at its live context, whose ops table the provider filled in
        // when the device was opened.
        let poll_fn = unsafe { (*(*raw.as_ptr()).context).ops.poll_cq };
        let Some(poll_fn) = poll_fn else {
            // SAFETY: created above, destroyed exactly once.
            unsafe { (ctx.verbs().destroy_cq)(raw.as_ptr()) };
            return Err(VerbsError::invalid(format!(
                "{}: provider has no poll_cq in ibv_context.ops",
                ctx.name()
            )));
        };
        Ok(Arc::new(CompletionQueue {
            raw,
            ctx: Arc::clone(ctx),
            depth,
            poll_fn,
        }))
    }

    pub fn depth(&self) -> u32 {
        self.depth
    }

    pub fn device(&self) -> &str {
        self.ctx.name()
    }

    pub(crate) fn as_ptr(&self) -> *mut ib::ibv_cq {
        self.raw.as_ptr()
    }

    /// Moves up to `out.len()` completions (at most `POLL_BATCH` per call) into `out` and returns
    /// how many. Never blocks, never allocates. Error completions are returned like successful
    /// ones: check each with `WorkCompletion::result`.
    pub fn poll(&self, out: &mut [WorkCompletion]) -> Result<usize> {
        let want = out.len().min(POLL_BATCH);
        if want == 0 {
            return Ok(0);
        }
        let mut raw: [MaybeUninit<ib::ibv_wc>; POLL_BATCH] =
            [const { MaybeUninit::uninit() }; POLL_BATCH];
        // SAFETY: live CQ; `raw` has room for `want` entries, which the provider fills in. The
        // call goes through the context's ops table, as verbs.h's inline ibv_poll_cq does.
        let n = unsafe { (self.poll_fn)(self.as_ptr(), want as i32, raw[0].as_mut_ptr()) };
        if n < 0 {
            return Err(VerbsError::from_rc("ibv_poll_cq", self.ctx.name(), -n));
        }
        let n = n as usize;
        for (slot, wc) in out.iter_mut().zip(raw.iter()).take(n) {
            // SAFETY: the provider initialised the first `n` entries.
            *slot = WorkCompletion::from_raw(unsafe { wc.assume_init_ref() });
        }
        Ok(n)
    }

    /// Turns an error completion into an error naming this CQ's device; Ok for success.
    pub fn check(&self, wc: &WorkCompletion) -> Result<()> {
        wc.result(self.ctx.name())
    }
}

impl Drop for CompletionQueue {
    fn drop(&mut self) {
        // SAFETY: QPs hold an Arc to their CQs, so none is attached any more; destroyed once.
        unsafe {
            (self.ctx.verbs().destroy_cq)(self.raw.as_ptr());
        }
    }
}

/// A contiguous local range usable as a work request's scatter/gather entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalSlice {
    pub addr: u64,
    pub len: u32,
    pub lkey: u32,
}

/// A remote range a peer registered: where an RDMA write lands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteSlice {
    pub addr: u64,
    pub rkey: u32,
}

/// A registered memory region (`ibv_mr`) with local write and remote read/write access.
pub struct MemoryRegion {
    raw: NonNull<ib::ibv_mr>,
    pd: Arc<ProtectionDomain>,
    addr: u64,
    len: usize,
    lkey: u32,
    rkey: u32,
}

// SAFETY: the MR handle is immutable after registration; verbs allow using it from any thread.
unsafe impl Send for MemoryRegion {}
// SAFETY: as above.
unsafe impl Sync for MemoryRegion {}

impl std::fmt::Debug for MemoryRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "MemoryRegion({} {:#x}+{} lkey {:#x} rkey {:#x})",
            self.pd.context().name(),
            self.addr,
            self.len,
            self.lkey,
            self.rkey
        )
    }
}

impl MemoryRegion {
    /// Registers `len` bytes at `addr` with LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ (and
    /// RELAXED_ORDERING when the PD asks for it).
    ///
    /// # Safety
    /// The range must be valid memory of this process that stays allocated until this region is
    /// dropped and every work request that uses it has completed. The NIC may write into it at any
    /// time a peer chooses: the caller must not hold Rust references to it while that can happen.
    pub(crate) unsafe fn register_raw(
        pd: &Arc<ProtectionDomain>,
        addr: *mut u8,
        len: usize,
    ) -> Result<Self> {
        if addr.is_null() || len == 0 {
            return Err(VerbsError::invalid(format!(
                "cannot register {len} bytes at {addr:p} on {}",
                pd.context().name()
            )));
        }
        let access =
            ib::IBV_ACCESS_LOCAL_WRITE | ib::IBV_ACCESS_REMOTE_WRITE | ib::IBV_ACCESS_REMOTE_READ;
        let v = pd.context().verbs();
        let raw = match (pd.relaxed_ordering, v.reg_mr_iova2) {
            // as verbs.h's ibv_reg_mr macro does for flags in the optional range
            // SAFETY: live PD; the caller guarantees the range (see the function's contract).
            (true, Some(reg_iova2)) => unsafe {
                reg_iova2(
                    pd.as_ptr(),
                    addr.cast(),
                    len,
                    addr as u64,
                    access | ib::IBV_ACCESS_RELAXED_ORDERING,
                )
            },
            // SAFETY: as above.
            _ => unsafe { (v.reg_mr)(pd.as_ptr(), addr.cast(), len, access as i32) },
        };
        let raw = NonNull::new(raw)
            .ok_or_else(|| VerbsError::last_os("ibv_reg_mr", pd.context().name()))?;
        // SAFETY: a successful ibv_reg_mr returns an initialised ibv_mr.
        let (lkey, rkey) = unsafe { ((*raw.as_ptr()).lkey, (*raw.as_ptr()).rkey) };
        Ok(MemoryRegion {
            raw,
            pd: Arc::clone(pd),
            addr: addr as u64,
            len,
            lkey,
            rkey,
        })
    }

    /// Takes ownership of a region registered elsewhere in this layer (dma-buf, cached page
    /// ranges: see `mrcache`), which `addr`/`len` describe; deregistered on drop.
    ///
    /// # Safety
    /// `raw` is a live `ibv_mr` of `pd` returned by a registration call and owned by no one else.
    pub(super) unsafe fn adopt(
        pd: &Arc<ProtectionDomain>,
        raw: NonNull<ib::ibv_mr>,
        addr: u64,
        len: usize,
    ) -> Self {
        // SAFETY: a successful registration returns an initialised ibv_mr.
        let (lkey, rkey) = unsafe { ((*raw.as_ptr()).lkey, (*raw.as_ptr()).rkey) };
        MemoryRegion {
            raw,
            pd: Arc::clone(pd),
            addr,
            len,
            lkey,
            rkey,
        }
    }

    pub fn addr(&self) -> u64 {
        self.addr
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn lkey(&self) -> u32 {
        self.lkey
    }

    pub fn rkey(&self) -> u32 {
        self.rkey
    }

    pub fn pd(&self) -> &Arc<ProtectionDomain> {
        &self.pd
    }

    fn check_range(&self, offset: usize, len: usize) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(VerbsError::invalid(format!(
                "range {offset}+{len} outside the {}-byte region (lkey {:#x}) on {}",
                self.len,
                self.lkey,
                self.pd.context().name()
            ))),
        }
    }

    /// The local range `[offset, offset+len)` as a scatter/gather entry (bounds-checked).
    pub fn local(&self, offset: usize, len: usize) -> Result<LocalSlice> {
        self.check_range(offset, len)?;
        let len = u32::try_from(len)
            .map_err(|_| VerbsError::invalid(format!("slice of {len} bytes exceeds 4 GiB")))?;
        Ok(LocalSlice {
            addr: self.addr + offset as u64,
            len,
            lkey: self.lkey,
        })
    }

    /// What a peer needs to write at `offset` of this region (bounds-checked).
    pub fn remote(&self, offset: usize) -> Result<RemoteSlice> {
        self.check_range(offset, 0)?;
        Ok(RemoteSlice {
            addr: self.addr + offset as u64,
            rkey: self.rkey,
        })
    }
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        // SAFETY: registered by us and deregistered exactly once.
        unsafe {
            (self.pd.context().verbs().dereg_mr)(self.raw.as_ptr());
        }
    }
}

/// Page-aligned zeroed heap memory, freed on drop.
struct AlignedMem {
    ptr: NonNull<u8>,
    layout: Layout,
}

impl Drop for AlignedMem {
    fn drop(&mut self) {
        // SAFETY: allocated in `RegisteredBuffer::new` with exactly this layout.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

/// An owned, page-aligned buffer registered as a memory region. Access goes through copies
/// (`write`, `read`), never references, because the NIC may write into it at any time.
pub struct RegisteredBuffer {
    // declared before `mem`: the region is deregistered before the memory is freed
    mr: MemoryRegion,
    mem: AlignedMem,
}

// SAFETY: the memory is only touched through `&mut self` writes and `&self` copies.
unsafe impl Send for RegisteredBuffer {}
// SAFETY: as above.
unsafe impl Sync for RegisteredBuffer {}

impl RegisteredBuffer {
    /// Allocates `len` zeroed bytes (page-aligned) and registers them on `pd`.
    pub fn new(pd: &Arc<ProtectionDomain>, len: usize) -> Result<Self> {
        if len == 0 {
            return Err(VerbsError::invalid(
                "a registered buffer needs at least one byte",
            ));
        }
        let layout = Layout::from_size_align(len, 4096)
            .map_err(|_| VerbsError::invalid(format!("buffer of {len} bytes too large")))?;
        // SAFETY: layout has non-zero size.
        let ptr = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(ptr)
            .ok_or_else(|| VerbsError::invalid(format!("out of memory allocating {len} bytes")))?;
        let mem = AlignedMem { ptr, layout };
        // SAFETY: `mem` is a live allocation of `len` bytes that outlives `mr` (field order), and
        // no Rust reference into it is ever handed out.
        let mr = unsafe { MemoryRegion::register_raw(pd, mem.ptr.as_ptr(), len)? };
        Ok(RegisteredBuffer { mr, mem })
    }

    pub fn mr(&self) -> &MemoryRegion {
        &self.mr
    }

    pub fn len(&self) -> usize {
        self.mr.len
    }

    pub fn is_empty(&self) -> bool {
        self.mr.len == 0
    }

    /// Copies `data` into the buffer at `offset`.
    pub fn write(&mut self, offset: usize, data: &[u8]) -> Result<()> {
        self.mr.check_range(offset, data.len())?;
        // SAFETY: range checked above; source and destination cannot overlap (`data` is a
        // Rust slice, the buffer is never lent out as one).
        unsafe {
            std::ptr::copy_nonoverlapping(
                data.as_ptr(),
                self.mem.ptr.as_ptr().add(offset),
                data.len(),
            )
        }
        Ok(())
    }

    /// Copies `out.len()` bytes from the buffer at `offset` into `out`.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        self.mr.check_range(offset, out.len())?;
        // SAFETY: range checked above; no overlap as in `write`.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.mem.ptr.as_ptr().add(offset),
                out.as_mut_ptr(),
                out.len(),
            )
        }
        Ok(())
    }

    /// Reads the little-endian u32 at `offset` with a volatile load (memory the NIC may be
    /// writing: each call reads it afresh), then orders later reads after it (acquire fence).
    pub fn read_u32_volatile(&self, offset: usize) -> Result<u32> {
        self.mr.check_range(offset, 4)?;
        let mut b = [0u8; 4];
        for (i, out) in b.iter_mut().enumerate() {
            // SAFETY: range checked above; byte loads have no alignment requirement.
            *out = unsafe { std::ptr::read_volatile(self.mem.ptr.as_ptr().add(offset + i)) };
        }
        std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
        Ok(u32::from_le_bytes(b))
    }

    /// Zeroes `len` bytes at `offset`.
    pub fn zero(&mut self, offset: usize, len: usize) -> Result<()> {
        self.mr.check_range(offset, len)?;
        // SAFETY: range checked above.
        unsafe { std::ptr::write_bytes(self.mem.ptr.as_ptr().add(offset), 0, len) };
        Ok(())
    }

    /// Sets every byte to `value`.
    pub fn fill(&mut self, value: u8) {
        // SAFETY: writes exactly the allocation's length.
        unsafe { std::ptr::write_bytes(self.mem.ptr.as_ptr(), value, self.mr.len) }
    }
}
