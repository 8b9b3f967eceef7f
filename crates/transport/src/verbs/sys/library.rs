//! The libibverbs function table: dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL) once per process
//! and every entry resolved with dlvsym at IBVERBS_1.1 (as NCCL's ibvsymbols.cc does).

use super::attr::{
    ibv_device_attr, ibv_gid, ibv_port_attr, ibv_qp_attr, ibv_qp_init_attr, ibv_srq_init_attr,
};
use super::objects::{ibv_context, ibv_cq, ibv_device, ibv_mr, ibv_pd, ibv_qp, ibv_srq};
use libc::{c_char, c_int, c_uint, c_void};
use std::ffi::CStr;
use std::fmt;
use std::sync::OnceLock;

/// The soname loaded.
pub const LIBIBVERBS: &str = "libibverbs.so.1";

/// Symbol version every table entry is looked up at (the version rdma-core's current ABI of these
/// calls has carried since 2006; `ibv_query_port@IBVERBS_1.1` takes the compat-sized port attr).
const IBVERBS_1_1: &CStr = c"IBVERBS_1.1";
/// `ibv_reg_mr_iova2` (needed for IBV_ACCESS_RELAXED_ORDERING) appeared in IBVERBS_1.8.
const IBVERBS_1_8: &CStr = c"IBVERBS_1.8";

/// Why the table could not be built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadError {
    /// dlopen failed; the text is dlerror()'s.
    NotLoadable(String),
    /// The library loaded but lacks a symbol the transport needs.
    MissingSymbol {
        symbol: &'static str,
        version: &'static str,
        detail: String,
    },
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::NotLoadable(why) => write!(f, "{LIBIBVERBS} not loadable ({why})"),
            LoadError::MissingSymbol {
                symbol,
                version,
                detail,
            } => write!(
                f,
                "{LIBIBVERBS} has no symbol {symbol}@{version} ({detail})"
            ),
        }
    }
}

impl std::error::Error for LoadError {}

/// The verbs this transport calls outside the data path. The data-path verbs (post_send,
/// post_recv, post_srq_recv, poll_cq) are inline in verbs.h and go through `ibv_context.ops` instead.
pub struct Verbs {
    pub get_device_list: unsafe extern "C" fn(num_devices: *mut c_int) -> *mut *mut ibv_device,
    pub free_device_list: unsafe extern "C" fn(list: *mut *mut ibv_device),
    pub get_device_name: unsafe extern "C" fn(device: *mut ibv_device) -> *const c_char,
    /// Returns the node GUID in network byte order.
    pub get_device_guid: unsafe extern "C" fn(device: *mut ibv_device) -> u64,
    pub open_device: unsafe extern "C" fn(device: *mut ibv_device) -> *mut ibv_context,
    pub close_device: unsafe extern "C" fn(context: *mut ibv_context) -> c_int,
    pub query_device:
        unsafe extern "C" fn(context: *mut ibv_context, attr: *mut ibv_device_attr) -> c_int,
    /// The exported (non-inline) `ibv_query_port`: fills the compat prefix of `ibv_port_attr`.
    pub query_port: unsafe extern "C" fn(
        context: *mut ibv_context,
        port_num: u8,
        attr: *mut ibv_port_attr,
    ) -> c_int,
    pub query_gid: unsafe extern "C" fn(
        context: *mut ibv_context,
        port_num: u8,
        index: c_int,
        gid: *mut ibv_gid,
    ) -> c_int,
    pub query_qp: unsafe extern "C" fn(
        qp: *mut ibv_qp,
        attr: *mut ibv_qp_attr,
        attr_mask: c_int,
        init_attr: *mut ibv_qp_init_attr,
    ) -> c_int,
    pub alloc_pd: unsafe extern "C" fn(context: *mut ibv_context) -> *mut ibv_pd,
    pub dealloc_pd: unsafe extern "C" fn(pd: *mut ibv_pd) -> c_int,
    /// The exported `ibv_reg_mr` (verbs.h's macro of the same name picks it for constant access
    /// flags outside the optional range).
    pub reg_mr: unsafe extern "C" fn(
        pd: *mut ibv_pd,
        addr: *mut c_void,
        length: usize,
        access: c_int,
    ) -> *mut ibv_mr,
    /// `ibv_reg_mr_iova2@IBVERBS_1.8` when the library has it (optional access flags).
    pub reg_mr_iova2: Option<
        unsafe extern "C" fn(
            pd: *mut ibv_pd,
            addr: *mut c_void,
            length: usize,
            iova: u64,
            access: c_uint,
        ) -> *mut ibv_mr,
    >,
    pub dereg_mr: unsafe extern "C" fn(mr: *mut ibv_mr) -> c_int,
    pub create_cq: unsafe extern "C" fn(
        context: *mut ibv_context,
        cqe: c_int,
        cq_context: *mut c_void,
        channel: *mut c_void,
        comp_vector: c_int,
    ) -> *mut ibv_cq,
    pub destroy_cq: unsafe extern "C" fn(cq: *mut ibv_cq) -> c_int,
    pub create_srq:
        unsafe extern "C" fn(pd: *mut ibv_pd, init_attr: *mut ibv_srq_init_attr) -> *mut ibv_srq,
    pub destroy_srq: unsafe extern "C" fn(srq: *mut ibv_srq) -> c_int,
    pub create_qp:
        unsafe extern "C" fn(pd: *mut ibv_pd, init_attr: *mut ibv_qp_init_attr) -> *mut ibv_qp,
    pub modify_qp:
        unsafe extern "C" fn(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, attr_mask: c_int) -> c_int,
    pub destroy_qp: unsafe extern "C" fn(qp: *mut ibv_qp) -> c_int,
    pub wc_status_str: unsafe extern "C" fn(status: u32) -> *const c_char,
}

/// Last dlerror() text, or `fallback` when there is none.
fn dlerror_text(fallback: &str) -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated string valid until the next dl* call on
    // this thread; it is copied out at once.
    let p = unsafe { libc::dlerror() };
    if p.is_null() {
        return fallback.to_string();
    }
    // SAFETY: non-NULL, NUL-terminated (see above).
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// Looks `name@version` up in `handle`.
pub(super) fn lookup(
    handle: *mut c_void,
    name: &'static CStr,
    version: &'static CStr,
) -> Result<*mut c_void, LoadError> {
    // SAFETY: clears any stale error so the text below belongs to this lookup.
    unsafe { libc::dlerror() };
    // SAFETY: `handle` is a live dlopen handle (never closed); both strings are NUL-terminated.
    let p = unsafe { libc::dlvsym(handle, name.as_ptr(), version.as_ptr()) };
    if p.is_null() {
        return Err(LoadError::MissingSymbol {
            symbol: name.to_str().unwrap_or("?"),
            version: version.to_str().unwrap_or("?"),
            detail: dlerror_text("symbol not found"),
        });
    }
    Ok(p)
}

/// Reinterprets a symbol address as the function pointer type `F`.
///
/// # Safety
/// `p` must be the address of a function whose C prototype `F` spells exactly.
pub(crate) unsafe fn as_fn<F: Copy>(p: *mut c_void) -> F {
    const { assert!(std::mem::size_of::<F>() == std::mem::size_of::<*mut c_void>()) };
    // SAFETY: same size (checked at compile time); function and data pointers share one
    // representation on the platforms libibverbs exists for; the caller vouches for the type.
    unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) }
}

macro_rules! required {
    ($handle:expr, $name:literal) => {{
        let p = lookup($handle, $name, IBVERBS_1_1)?;
        // SAFETY: the symbol is libibverbs' function of this name and version, whose C prototype
        // (verbs.h) is the field's type.
        unsafe { as_fn(p) }
    }};
}

impl Verbs {
    fn load() -> Result<Verbs, LoadError> {
        let soname = c"libibverbs.so.1";
        // SAFETY: clears any stale error.
        unsafe { libc::dlerror() };
        // SAFETY: plain dlopen of a system library by soname; the handle is never closed, so
        // every function pointer taken from it stays valid for the life of the process.
        let handle = unsafe { libc::dlopen(soname.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if handle.is_null() {
            return Err(LoadError::NotLoadable(dlerror_text("dlopen failed")));
        }
        let reg_mr_iova2 = match lookup(handle, c"ibv_reg_mr_iova2", IBVERBS_1_8) {
            // SAFETY: as in `required!`: ibv_reg_mr_iova2's prototype is the field's type.
            Ok(p) => Some(unsafe { as_fn(p) }),
            Err(_) => None,
        };
        Ok(Verbs {
            get_device_list: required!(handle, c"ibv_get_device_list"),
            free_device_list: required!(handle, c"ibv_free_device_list"),
            get_device_name: required!(handle, c"ibv_get_device_name"),
            get_device_guid: required!(handle, c"ibv_get_device_guid"),
            open_device: required!(handle, c"ibv_open_device"),
            close_device: required!(handle, c"ibv_close_device"),
            query_device: required!(handle, c"ibv_query_device"),
            query_port: required!(handle, c"ibv_query_port"),
            query_gid: required!(handle, c"ibv_query_gid"),
            query_qp: required!(handle, c"ibv_query_qp"),
            alloc_pd: required!(handle, c"ibv_alloc_pd"),
            dealloc_pd: required!(handle, c"ibv_dealloc_pd"),
            reg_mr: required!(handle, c"ibv_reg_mr"),
            reg_mr_iova2,
            dereg_mr: required!(handle, c"ibv_dereg_mr"),
            create_cq: required!(handle, c"ibv_create_cq"),
            destroy_cq: required!(handle, c"ibv_destroy_cq"),
            create_srq: required!(handle, c"ibv_create_srq"),
            destroy_srq: required!(handle, c"ibv_destroy_srq"),
            create_qp: required!(handle, c"ibv_create_qp"),
            modify_qp: required!(handle, c"ibv_modify_qp"),
            destroy_qp: required!(handle, c"ibv_destroy_qp"),
            wc_status_str: required!(handle, c"ibv_wc_status_str"),
        })
    }
}

static VERBS: OnceLock<Result<Verbs, LoadError>> = OnceLock::new();

/// The function table, loaded on first use (the plugin's init, through device discovery) and
/// shared for the life of the process; the same error on every call when loading failed.
pub fn verbs() -> Result<&'static Verbs, LoadError> {
    VERBS
        .get_or_init(Verbs::load)
        .as_ref()
        .map_err(Clone::clone)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_symbols_name_themselves() {
        // SAFETY: dlopen of the C library this process already has loaded; never closed.
        let libc_handle = unsafe { libc::dlopen(c"libc.so.6".as_ptr(), libc::RTLD_NOW) };
        assert!(!libc_handle.is_null());
        let err = lookup(libc_handle, c"ibv_no_such_verb", IBVERBS_1_1).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("ibv_no_such_verb@IBVERBS_1.1") && text.contains(LIBIBVERBS),
            "{text}"
        );
    }

    #[test]
    fn table_loads_once_or_reports_why() {
        match (verbs(), verbs()) {
            (Ok(a), Ok(b)) => {
                assert!(std::ptr::eq(a, b), "one table per process");
            }
            (Err(a), Err(b)) => {
                assert_eq!(a, b);
                eprintln!("SKIPPED: {a}");
            }
            _ => panic!("the table changed between calls"),
        }
    }
}
