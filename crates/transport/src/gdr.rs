//! Transport-neutral GPUDirect facts: NCCL's pointer types, the test-only switch that forces
//! NCCL_PTR_CUDA on, and the 0/1 parser of such switches (the verbs detection is in verbs/caps.rs).

/// NCCL's pointer types (nccl_net.h NCCL_PTR_HOST / NCCL_PTR_CUDA / NCCL_PTR_DMABUF).
pub const PTR_HOST: i32 = 1;
pub const PTR_CUDA: i32 = 2;
pub const PTR_DMABUF: i32 = 4;

/// TEST ONLY: `DQPLB_TEST_FORCE_GDR=1` advertises NCCL_PTR_CUDA on every device whatever the
/// detection says, so that the GDR code paths (NCCL's GDR probe, CUDA-typed regMr, iflush) run on
/// machines without a GPU, with host memory standing in for device memory. Never set it in
/// production: NCCL would hand real GPU pointers to a NIC that cannot reach them.
pub const FORCE_GDR_ENV: &str = "DQPLB_TEST_FORCE_GDR";

use crate::{NetError, NetResult};

/// Reads a 0/1 switch (unset or empty = 0); anything else is an invalid argument naming it.
pub fn switch_from(get: impl Fn(&str) -> Option<String>, var: &str) -> NetResult<bool> {
    match get(var).as_deref().map(str::trim) {
        None | Some("") | Some("0") => Ok(false),
        Some("1") => Ok(true),
        Some(v) => Err(NetError::invalid_argument(format!(
            "{var}={v:?}: must be 0 or 1"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn switches_are_zero_or_one() {
        let get = |v: &'static str| move |_: &str| Some(v.to_string());
        assert_eq!(switch_from(|_| None, FORCE_GDR_ENV), Ok(false));
        assert_eq!(switch_from(get(""), FORCE_GDR_ENV), Ok(false));
        assert_eq!(switch_from(get("0"), FORCE_GDR_ENV), Ok(false));
        assert_eq!(switch_from(get(" 1 "), FORCE_GDR_ENV), Ok(true));
        assert_eq!(
            switch_from(get("yes"), FORCE_GDR_ENV),
            Err(NetError::invalid_argument(
                "DQPLB_TEST_FORCE_GDR=\"yes\": must be 0 or 1"
            ))
        );
    }
}
