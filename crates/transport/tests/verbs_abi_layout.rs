//! Our hand-written libibverbs ABI (crates/transport/src/verbs/sys) against the system's verbs.h: a C
//! program compiled here with `cc` prints sizeof/offsetof of every field we define and each
//! constant's value; all must equal Rust's size_of / offset_of!. Skipped without the header.
#![cfg(feature = "verbs")]

use dqplb_transport::verbs::sys::*;
use std::collections::BTreeMap;
use std::mem::{offset_of, size_of, MaybeUninit};
use std::path::Path;
use std::process::Command;

const HEADER: &str = "/usr/include/infiniband/verbs.h";

/// One line the C program prints and the value Rust computes for it.
struct Entry {
    /// "ibv_wc.wr_id offset", "ibv_wc.wr_id size", "ibv_wc sizeof", "IBV_QP_STATE value".
    key: String,
    rust: u64,
    /// C expression printing the same quantity.
    c_expr: String,
}

fn size_of_pointee<F>(_: *const F) -> usize {
    size_of::<F>()
}

macro_rules! fields {
    ($out:ident, $cty:literal, $t:ident, [ $( $c:literal => $($r:ident).+ , )* ]) => {{
        $out.push(Entry {
            key: format!("{} sizeof", stringify!($t)),
            rust: size_of::<$t>() as u64,
            c_expr: format!("sizeof({})", $cty),
        });
        $out.push(Entry {
            key: format!("{} alignof", stringify!($t)),
            rust: std::mem::align_of::<$t>() as u64,
            c_expr: format!("_Alignof({})", $cty),
        });
        $(
            $out.push(Entry {
                key: format!("{}.{} offset", stringify!($t), $c),
                rust: offset_of!($t, $($r).+) as u64,
                c_expr: format!("offsetof({}, {})", $cty, $c),
            });
            let base = MaybeUninit::<$t>::uninit();
            let p = base.as_ptr();
            // SAFETY: only the field's address is formed (no reference, no read).
            let size = size_of_pointee(unsafe { std::ptr::addr_of!((*p).$($r).+) });
            $out.push(Entry {
                key: format!("{}.{} size", stringify!($t), $c),
                rust: size as u64,
                c_expr: format!("sizeof((({} *)0)->{})", $cty, $c),
            });
        )*
    }};
}

macro_rules! const_entry {
    ($out:ident, $name:ident) => {
        $out.push(Entry {
            key: format!("{} value", stringify!($name)),
            rust: $name as u64,
            c_expr: format!("(unsigned long long){}", stringify!($name)),
        })
    };
}

fn entries() -> Vec<Entry> {
    let mut out = Vec::new();
    fields!(out, "struct _ibv_device_ops", _ibv_device_ops, [
        "_dummy1" => _dummy1,
        "_dummy2" => _dummy2,
    ]);
    fields!(out, "struct ibv_device", ibv_device, [
        "_ops" => _ops,
        "node_type" => node_type,
        "transport_type" => transport_type,
        "name" => name,
        "dev_name" => dev_name,
        "dev_path" => dev_path,
        "ibdev_path" => ibdev_path,
    ]);
    fields!(out, "struct ibv_context_ops", ibv_context_ops, [
        "_compat_query_device" => _compat_query_device,
        "_compat_query_port" => _compat_query_port,
        "_compat_alloc_pd" => _compat_alloc_pd,
        "_compat_dealloc_pd" => _compat_dealloc_pd,
        "_compat_reg_mr" => _compat_reg_mr,
        "_compat_rereg_mr" => _compat_rereg_mr,
        "_compat_dereg_mr" => _compat_dereg_mr,
        "alloc_mw" => alloc_mw,
        "bind_mw" => bind_mw,
        "dealloc_mw" => dealloc_mw,
        "_compat_create_cq" => _compat_create_cq,
        "poll_cq" => poll_cq,
        "req_notify_cq" => req_notify_cq,
        "_compat_cq_event" => _compat_cq_event,
        "_compat_resize_cq" => _compat_resize_cq,
        "_compat_destroy_cq" => _compat_destroy_cq,
        "_compat_create_srq" => _compat_create_srq,
        "_compat_modify_srq" => _compat_modify_srq,
        "_compat_query_srq" => _compat_query_srq,
        "_compat_destroy_srq" => _compat_destroy_srq,
        "post_srq_recv" => post_srq_recv,
        "_compat_create_qp" => _compat_create_qp,
        "_compat_query_qp" => _compat_query_qp,
        "_compat_modify_qp" => _compat_modify_qp,
        "_compat_destroy_qp" => _compat_destroy_qp,
        "post_send" => post_send,
        "post_recv" => post_recv,
        "_compat_create_ah" => _compat_create_ah,
        "_compat_destroy_ah" => _compat_destroy_ah,
        "_compat_attach_mcast" => _compat_attach_mcast,
        "_compat_detach_mcast" => _compat_detach_mcast,
        "_compat_async_event" => _compat_async_event,
    ]);
    fields!(out, "struct ibv_context", ibv_context, [
        "device" => device,
        "ops" => ops,
        "cmd_fd" => cmd_fd,
        "async_fd" => async_fd,
        "num_comp_vectors" => num_comp_vectors,
        "mutex" => mutex,
        "abi_compat" => abi_compat,
    ]);
    fields!(out, "struct ibv_pd", ibv_pd, [
        "context" => context,
        "handle" => handle,
    ]);
    fields!(out, "struct ibv_mr", ibv_mr, [
        "context" => context,
        "pd" => pd,
        "addr" => addr,
        "length" => length,
        "handle" => handle,
        "lkey" => lkey,
        "rkey" => rkey,
    ]);
    fields!(out, "struct ibv_cq", ibv_cq, [
        "context" => context,
        "channel" => channel,
        "cq_context" => cq_context,
        "handle" => handle,
        "cqe" => cqe,
        "mutex" => mutex,
        "cond" => cond,
        "comp_events_completed" => comp_events_completed,
        "async_events_completed" => async_events_completed,
    ]);
    fields!(out, "struct ibv_qp", ibv_qp, [
        "context" => context,
        "qp_context" => qp_context,
        "pd" => pd,
        "send_cq" => send_cq,
        "recv_cq" => recv_cq,
        "srq" => srq,
        "handle" => handle,
        "qp_num" => qp_num,
        "state" => state,
        "qp_type" => qp_type,
        "mutex" => mutex,
        "cond" => cond,
        "events_completed" => events_completed,
    ]);
    fields!(out, "struct ibv_srq", ibv_srq, [
        "context" => context,
        "srq_context" => srq_context,
        "pd" => pd,
        "handle" => handle,
        "mutex" => mutex,
        "cond" => cond,
        "events_completed" => events_completed,
    ]);
    fields!(out, "struct ibv_srq_attr", ibv_srq_attr, [
        "max_wr" => max_wr,
        "max_sge" => max_sge,
        "srq_limit" => srq_limit,
    ]);
    fields!(out, "struct ibv_srq_init_attr", ibv_srq_init_attr, [
        "srq_context" => srq_context,
        "attr" => attr,
        "attr.max_wr" => attr.max_wr,
    ]);
    fields!(out, "struct ibv_sge", ibv_sge, [
        "addr" => addr,
        "length" => length,
        "lkey" => lkey,
    ]);
    fields!(out, "struct ibv_mw_bind_info", ibv_mw_bind_info, [
        "mr" => mr,
        "addr" => addr,
        "length" => length,
        "mw_access_flags" => mw_access_flags,
    ]);
    fields!(out, "struct ibv_send_wr", ibv_send_wr, [
        "wr_id" => wr_id,
        "next" => next,
        "sg_list" => sg_list,
        "num_sge" => num_sge,
        "opcode" => opcode,
        "send_flags" => send_flags,
        "wr" => wr,
        "qp_type" => qp_type,
        "imm_data" => imm_data_invalidated_rkey_union.imm_data,
        "invalidate_rkey" => imm_data_invalidated_rkey_union.invalidate_rkey,
        "wr.rdma.remote_addr" => wr.rdma.remote_addr,
        "wr.rdma.rkey" => wr.rdma.rkey,
        "wr.atomic.remote_addr" => wr.atomic.remote_addr,
        "wr.atomic.compare_add" => wr.atomic.compare_add,
        "wr.atomic.swap" => wr.atomic.swap,
        "wr.atomic.rkey" => wr.atomic.rkey,
        "wr.ud.ah" => wr.ud.ah,
        "wr.ud.remote_qpn" => wr.ud.remote_qpn,
        "wr.ud.remote_qkey" => wr.ud.remote_qkey,
        "qp_type.xrc.remote_srqn" => qp_type.xrc.remote_srqn,
        "bind_mw" => bind_mw_tso_union.bind_mw,
        "bind_mw.mw" => bind_mw_tso_union.bind_mw.mw,
        "bind_mw.rkey" => bind_mw_tso_union.bind_mw.rkey,
        "bind_mw.bind_info" => bind_mw_tso_union.bind_mw.bind_info,
        "tso" => bind_mw_tso_union.tso,
        "tso.hdr" => bind_mw_tso_union.tso.hdr,
        "tso.hdr_sz" => bind_mw_tso_union.tso.hdr_sz,
        "tso.mss" => bind_mw_tso_union.tso.mss,
    ]);
    fields!(out, "struct ibv_recv_wr", ibv_recv_wr, [
        "wr_id" => wr_id,
        "next" => next,
        "sg_list" => sg_list,
        "num_sge" => num_sge,
    ]);
    fields!(out, "struct ibv_wc", ibv_wc, [
        "wr_id" => wr_id,
        "status" => status,
        "opcode" => opcode,
        "vendor_err" => vendor_err,
        "byte_len" => byte_len,
        "qp_num" => qp_num,
        "src_qp" => src_qp,
        "wc_flags" => wc_flags,
        "pkey_index" => pkey_index,
        "slid" => slid,
        "sl" => sl,
        "dlid_path_bits" => dlid_path_bits,
        "imm_data" => imm_data_invalidated_rkey_union.imm_data,
        "invalidated_rkey" => imm_data_invalidated_rkey_union.invalidated_rkey,
    ]);
    fields!(out, "union ibv_gid", ibv_gid, [
        "raw" => raw,
        "global" => global,
        "global.subnet_prefix" => global.subnet_prefix,
        "global.interface_id" => global.interface_id,
    ]);
    fields!(out, "struct ibv_global_route", ibv_global_route, [
        "dgid" => dgid,
        "flow_label" => flow_label,
        "sgid_index" => sgid_index,
        "hop_limit" => hop_limit,
        "traffic_class" => traffic_class,
    ]);
    fields!(out, "struct ibv_ah_attr", ibv_ah_attr, [
        "grh" => grh,
        "dlid" => dlid,
        "sl" => sl,
        "src_path_bits" => src_path_bits,
        "static_rate" => static_rate,
        "is_global" => is_global,
        "port_num" => port_num,
        "grh.dgid" => grh.dgid,
        "grh.sgid_index" => grh.sgid_index,
        "grh.traffic_class" => grh.traffic_class,
    ]);
    fields!(out, "struct ibv_qp_cap", ibv_qp_cap, [
        "max_send_wr" => max_send_wr,
        "max_recv_wr" => max_recv_wr,
        "max_send_sge" => max_send_sge,
        "max_recv_sge" => max_recv_sge,
        "max_inline_data" => max_inline_data,
    ]);
    fields!(out, "struct ibv_qp_init_attr", ibv_qp_init_attr, [
        "qp_context" => qp_context,
        "send_cq" => send_cq,
        "recv_cq" => recv_cq,
        "srq" => srq,
        "cap" => cap,
        "qp_type" => qp_type,
        "sq_sig_all" => sq_sig_all,
    ]);
    fields!(out, "struct ibv_qp_attr", ibv_qp_attr, [
        "qp_state" => qp_state,
        "cur_qp_state" => cur_qp_state,
        "path_mtu" => path_mtu,
        "path_mig_state" => path_mig_state,
        "qkey" => qkey,
        "rq_psn" => rq_psn,
        "sq_psn" => sq_psn,
        "dest_qp_num" => dest_qp_num,
        "qp_access_flags" => qp_access_flags,
        "cap" => cap,
        "ah_attr" => ah_attr,
        "alt_ah_attr" => alt_ah_attr,
        "pkey_index" => pkey_index,
        "alt_pkey_index" => alt_pkey_index,
        "en_sqd_async_notify" => en_sqd_async_notify,
        "sq_draining" => sq_draining,
        "max_rd_atomic" => max_rd_atomic,
        "max_dest_rd_atomic" => max_dest_rd_atomic,
        "min_rnr_timer" => min_rnr_timer,
        "port_num" => port_num,
        "timeout" => timeout,
        "retry_cnt" => retry_cnt,
        "rnr_retry" => rnr_retry,
        "alt_port_num" => alt_port_num,
        "alt_timeout" => alt_timeout,
        "rate_limit" => rate_limit,
    ]);
    fields!(out, "struct ibv_port_attr", ibv_port_attr, [
        "state" => state,
        "max_mtu" => max_mtu,
        "active_mtu" => active_mtu,
        "gid_tbl_len" => gid_tbl_len,
        "port_cap_flags" => port_cap_flags,
        "max_msg_sz" => max_msg_sz,
        "bad_pkey_cntr" => bad_pkey_cntr,
        "qkey_viol_cntr" => qkey_viol_cntr,
        "pkey_tbl_len" => pkey_tbl_len,
        "lid" => lid,
        "sm_lid" => sm_lid,
        "lmc" => lmc,
        "max_vl_num" => max_vl_num,
        "sm_sl" => sm_sl,
        "subnet_timeout" => subnet_timeout,
        "init_type_reply" => init_type_reply,
        "active_width" => active_width,
        "active_speed" => active_speed,
        "phys_state" => phys_state,
        "link_layer" => link_layer,
        "flags" => flags,
        "port_cap_flags2" => port_cap_flags2,
    ]);
    fields!(out, "struct ibv_device_attr", ibv_device_attr, [
        "fw_ver" => fw_ver,
        "node_guid" => node_guid,
        "sys_image_guid" => sys_image_guid,
        "max_mr_size" => max_mr_size,
        "page_size_cap" => page_size_cap,
        "vendor_id" => vendor_id,
        "vendor_part_id" => vendor_part_id,
        "hw_ver" => hw_ver,
        "max_qp" => max_qp,
        "max_qp_wr" => max_qp_wr,
        "device_cap_flags" => device_cap_flags,
        "max_sge" => max_sge,
        "max_sge_rd" => max_sge_rd,
        "max_cq" => max_cq,
        "max_cqe" => max_cqe,
        "max_mr" => max_mr,
        "max_pd" => max_pd,
        "max_qp_rd_atom" => max_qp_rd_atom,
        "max_ee_rd_atom" => max_ee_rd_atom,
        "max_res_rd_atom" => max_res_rd_atom,
        "max_qp_init_rd_atom" => max_qp_init_rd_atom,
        "max_ee_init_rd_atom" => max_ee_init_rd_atom,
        "atomic_cap" => atomic_cap,
        "max_ee" => max_ee,
        "max_rdd" => max_rdd,
        "max_mw" => max_mw,
        "max_raw_ipv6_qp" => max_raw_ipv6_qp,
        "max_raw_ethy_qp" => max_raw_ethy_qp,
        "max_mcast_grp" => max_mcast_grp,
        "max_mcast_qp_attach" => max_mcast_qp_attach,
        "max_total_mcast_qp_attach" => max_total_mcast_qp_attach,
        "max_ah" => max_ah,
        "max_fmr" => max_fmr,
        "max_map_per_fmr" => max_map_per_fmr,
        "max_srq" => max_srq,
        "max_srq_wr" => max_srq_wr,
        "max_srq_sge" => max_srq_sge,
        "max_pkeys" => max_pkeys,
        "local_ca_ack_delay" => local_ca_ack_delay,
        "phys_port_cnt" => phys_port_cnt,
    ]);
    const_entry!(out, IBV_WC_SUCCESS);
    const_entry!(out, IBV_WC_LOC_LEN_ERR);
    const_entry!(out, IBV_WC_LOC_QP_OP_ERR);
    const_entry!(out, IBV_WC_LOC_PROT_ERR);
    const_entry!(out, IBV_WC_WR_FLUSH_ERR);
    const_entry!(out, IBV_WC_REM_ACCESS_ERR);
    const_entry!(out, IBV_WC_REM_OP_ERR);
    const_entry!(out, IBV_WC_RETRY_EXC_ERR);
    const_entry!(out, IBV_WC_RNR_RETRY_EXC_ERR);
    const_entry!(out, IBV_WC_GENERAL_ERR);
    const_entry!(out, IBV_WC_SEND);
    const_entry!(out, IBV_WC_RDMA_WRITE);
    const_entry!(out, IBV_WC_RDMA_READ);
    const_entry!(out, IBV_WC_RECV);
    const_entry!(out, IBV_WC_RECV_RDMA_WITH_IMM);
    const_entry!(out, IBV_WC_WITH_IMM);
    const_entry!(out, IBV_WR_RDMA_WRITE);
    const_entry!(out, IBV_WR_RDMA_WRITE_WITH_IMM);
    const_entry!(out, IBV_SEND_SIGNALED);
    const_entry!(out, IBV_ACCESS_LOCAL_WRITE);
    const_entry!(out, IBV_ACCESS_REMOTE_WRITE);
    const_entry!(out, IBV_ACCESS_REMOTE_READ);
    const_entry!(out, IBV_ACCESS_RELAXED_ORDERING);
    const_entry!(out, IBV_QP_STATE);
    const_entry!(out, IBV_QP_ACCESS_FLAGS);
    const_entry!(out, IBV_QP_PKEY_INDEX);
    const_entry!(out, IBV_QP_PORT);
    const_entry!(out, IBV_QP_AV);
    const_entry!(out, IBV_QP_PATH_MTU);
    const_entry!(out, IBV_QP_TIMEOUT);
    const_entry!(out, IBV_QP_RETRY_CNT);
    const_entry!(out, IBV_QP_RNR_RETRY);
    const_entry!(out, IBV_QP_RQ_PSN);
    const_entry!(out, IBV_QP_MAX_QP_RD_ATOMIC);
    const_entry!(out, IBV_QP_MIN_RNR_TIMER);
    const_entry!(out, IBV_QP_SQ_PSN);
    const_entry!(out, IBV_QP_MAX_DEST_RD_ATOMIC);
    const_entry!(out, IBV_QP_DEST_QPN);
    const_entry!(out, IBV_QPS_RESET);
    const_entry!(out, IBV_QPS_INIT);
    const_entry!(out, IBV_QPS_RTR);
    const_entry!(out, IBV_QPS_RTS);
    const_entry!(out, IBV_QPS_SQD);
    const_entry!(out, IBV_QPS_SQE);
    const_entry!(out, IBV_QPS_ERR);
    const_entry!(out, IBV_QPT_RC);
    const_entry!(out, IBV_PORT_ACTIVE);
    const_entry!(out, IBV_LINK_LAYER_UNSPECIFIED);
    const_entry!(out, IBV_LINK_LAYER_INFINIBAND);
    const_entry!(out, IBV_LINK_LAYER_ETHERNET);
    const_entry!(out, IBV_SYSFS_NAME_MAX);
    const_entry!(out, IBV_SYSFS_PATH_MAX);
    // sys/gdr.rs: iflush's READ, ibv_is_fork_initialized's answers
    const_entry!(out, IBV_WR_RDMA_READ);
    const_entry!(out, IBV_FORK_DISABLED);
    const_entry!(out, IBV_FORK_ENABLED);
    const_entry!(out, IBV_FORK_UNNEEDED);
    out
}

fn c_program(entries: &[Entry]) -> String {
    let mut c = String::from(
        "#include <infiniband/verbs.h>\n#include <stddef.h>\n#include <stdio.h>\nint main(void) {\n",
    );
    for e in entries {
        c += &format!(
            "  printf(\"%s %llu\\n\", \"{}\", (unsigned long long)({}));\n",
            e.key, e.c_expr
        );
    }
    c += "  return 0;\n}\n";
    c
}

#[test]
fn sys_structs_match_verbs_h() {
    if !Path::new(HEADER).exists() {
        // Where every check must run (CI: DQPLB_REQUIRE_ALL=1) a missing header is a failure.
        assert!(
            std::env::var("DQPLB_REQUIRE_ALL").as_deref() != Ok("1"),
            "no {HEADER}, and DQPLB_REQUIRE_ALL=1 requires the layout check (libibverbs-dev)"
        );
        println!("SKIPPED: no infiniband/verbs.h");
        return;
    }
    let entries = entries();
    let dir = std::env::temp_dir().join(format!("dqplb-abi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("mkdir");
    let src = dir.join("abi.c");
    let exe = dir.join("abi");
    std::fs::write(&src, c_program(&entries)).expect("write abi.c");
    let cc = Command::new("cc")
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("run cc (the system C compiler is needed with verbs.h)");
    assert!(
        cc.status.success(),
        "cc {}: {}",
        src.display(),
        String::from_utf8_lossy(&cc.stderr)
    );
    let run = Command::new(&exe).output().expect("run the layout program");
    assert!(run.status.success(), "layout program failed");
    let text = String::from_utf8_lossy(&run.stdout);
    let c: BTreeMap<String, u64> = text
        .lines()
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect();
    let mut bad = Vec::new();
    for e in &entries {
        match c.get(&e.key) {
            Some(&v) if v == e.rust => {}
            Some(&v) => bad.push(format!("{}: C {v}, Rust {}", e.key, e.rust)),
            None => bad.push(format!("{}: missing from the C output", e.key)),
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(bad.is_empty(), "ABI mismatches:\n{}", bad.join("\n"));
    println!(
        "{} sizes, offsets and constants match {HEADER}",
        entries.len()
    );
}
