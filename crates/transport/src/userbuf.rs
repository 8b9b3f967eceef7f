//! A caller-owned memory region lent to a transport for the life of one request (NCCL's
//! isend/irecv buffers); the one place where raw request memory becomes a slice.

/// A (pointer, length) region owned by the caller. Creating one is `unsafe`: the caller (the ffi
/// layer, on NCCL's behalf) promises the memory stays valid and unaliased by Rust references until
/// the request that uses it has completed or its comm was closed.
#[derive(Debug, Clone, Copy)]
pub struct UserBuf {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the region is plain memory whose lifetime the creator vouched for; NCCL calls one comm's
// data functions from one thread at a time.
unsafe impl Send for UserBuf {}

impl UserBuf {
    /// # Safety
    /// `ptr` must be valid for reads and writes of `len` bytes (or `len` is 0) until the request
    /// using this buffer is complete or its comm is closed.
    pub unsafe fn new(ptr: *mut u8, len: usize) -> UserBuf {
        UserBuf { ptr, len }
    }

    /// The empty buffer (placeholder for table entries; never dereferenced).
    pub const fn empty() -> UserBuf {
        UserBuf {
            ptr: std::ptr::null_mut(),
            len: 0,
        }
    }

    /// A buffer over a Rust slice (tests, perf): valid while the slice is.
    pub fn from_slice(s: &mut [u8]) -> UserBuf {
        UserBuf {
            ptr: s.as_mut_ptr(),
            len: s.len(),
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn addr(&self) -> usize {
        self.ptr as usize
    }

    /// The first `n` bytes (all of them when `n` is larger): a send cut to the receive buffer
    /// the peer posted, as net_ib's isend does.
    pub fn prefix(self, n: usize) -> UserBuf {
        UserBuf {
            ptr: self.ptr,
            len: self.len.min(n),
        }
    }

    /// Bytes `[off, off+n)`; None when outside the buffer.
    pub fn slice(&self, off: usize, n: usize) -> Option<&[u8]> {
        let end = off.checked_add(n)?;
        if end > self.len {
            return None;
        }
        if n == 0 {
            return Some(&[]);
        }
        // SAFETY: in bounds (checked above) of a region valid per the constructor's contract.
        Some(unsafe { std::slice::from_raw_parts(self.ptr.add(off), n) })
    }

    /// Mutable bytes `[off, off+n)`; None when outside the buffer.
    #[allow(clippy::mut_from_ref)]
    pub(crate) fn slice_mut(&self, off: usize, n: usize) -> Option<&mut [u8]> {
        let end = off.checked_add(n)?;
        if end > self.len {
            return None;
        }
        if n == 0 {
            return Some(&mut []);
        }
        // SAFETY: in bounds of a region valid and not otherwise referenced per the contract.
        Some(unsafe { std::slice::from_raw_parts_mut(self.ptr.add(off), n) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_checked() {
        let mut v = vec![1u8, 2, 3, 4];
        let b = UserBuf::from_slice(&mut v);
        assert_eq!(b.slice(1, 2), Some(&[2u8, 3][..]));
        assert_eq!(b.slice(3, 2), None);
        assert_eq!(b.slice(usize::MAX, 2), None);
        b.slice_mut(0, 1).unwrap()[0] = 9;
        assert_eq!(v[0], 9);
        // SAFETY: a zero-length buffer never dereferences its pointer.
        let empty = unsafe { UserBuf::new(std::ptr::null_mut(), 0) };
        assert_eq!(empty.slice(0, 0), Some(&[][..]));
        assert_eq!(empty.slice(0, 1), None);
    }
}
