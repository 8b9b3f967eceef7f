//! Numeric values of the libibverbs enums and flag sets this transport uses (verbs.h spells them as
//! C enums, which are `int`-sized: they travel as `u32` here).

// enum ibv_wc_status
pub const IBV_WC_SUCCESS: u32 = 0;
pub const IBV_WC_LOC_LEN_ERR: u32 = 1;
pub const IBV_WC_LOC_QP_OP_ERR: u32 = 2;
pub const IBV_WC_LOC_PROT_ERR: u32 = 4;
pub const IBV_WC_WR_FLUSH_ERR: u32 = 5;
pub const IBV_WC_REM_ACCESS_ERR: u32 = 10;
pub const IBV_WC_REM_OP_ERR: u32 = 11;
pub const IBV_WC_RETRY_EXC_ERR: u32 = 12;
pub const IBV_WC_RNR_RETRY_EXC_ERR: u32 = 13;
pub const IBV_WC_GENERAL_ERR: u32 = 21;

// enum ibv_wc_opcode
pub const IBV_WC_SEND: u32 = 0;
pub const IBV_WC_RDMA_WRITE: u32 = 1;
pub const IBV_WC_RDMA_READ: u32 = 2;
pub const IBV_WC_RECV: u32 = 1 << 7;
pub const IBV_WC_RECV_RDMA_WITH_IMM: u32 = (1 << 7) + 1;

// enum ibv_wc_flags
pub const IBV_WC_WITH_IMM: u32 = 1 << 1;

// enum ibv_wr_opcode
pub const IBV_WR_RDMA_WRITE: u32 = 0;
pub const IBV_WR_RDMA_WRITE_WITH_IMM: u32 = 1;

// enum ibv_send_flags
pub const IBV_SEND_SIGNALED: u32 = 1 << 1;
pub(crate) const IBV_SEND_INLINE: u32 = 1 << 3;

// enum ibv_access_flags (RELAXED_ORDERING is IBV_ACCESS_OPTIONAL_FIRST: needs ibv_reg_mr_iova2)
pub const IBV_ACCESS_LOCAL_WRITE: u32 = 1;
pub const IBV_ACCESS_REMOTE_WRITE: u32 = 1 << 1;
pub const IBV_ACCESS_REMOTE_READ: u32 = 1 << 2;
pub const IBV_ACCESS_RELAXED_ORDERING: u32 = 1 << 20;

// enum ibv_qp_attr_mask
pub const IBV_QP_STATE: u32 = 1 << 0;
pub const IBV_QP_ACCESS_FLAGS: u32 = 1 << 3;
pub const IBV_QP_PKEY_INDEX: u32 = 1 << 4;
pub const IBV_QP_PORT: u32 = 1 << 5;
pub const IBV_QP_AV: u32 = 1 << 7;
pub const IBV_QP_PATH_MTU: u32 = 1 << 8;
pub const IBV_QP_TIMEOUT: u32 = 1 << 9;
pub const IBV_QP_RETRY_CNT: u32 = 1 << 10;
pub const IBV_QP_RNR_RETRY: u32 = 1 << 11;
pub const IBV_QP_RQ_PSN: u32 = 1 << 12;
pub const IBV_QP_MAX_QP_RD_ATOMIC: u32 = 1 << 13;
pub const IBV_QP_MIN_RNR_TIMER: u32 = 1 << 15;
pub const IBV_QP_SQ_PSN: u32 = 1 << 16;
pub const IBV_QP_MAX_DEST_RD_ATOMIC: u32 = 1 << 17;
pub const IBV_QP_DEST_QPN: u32 = 1 << 20;

// enum ibv_qp_state
pub const IBV_QPS_RESET: u32 = 0;
pub const IBV_QPS_INIT: u32 = 1;
pub const IBV_QPS_RTR: u32 = 2;
pub const IBV_QPS_RTS: u32 = 3;
pub const IBV_QPS_SQD: u32 = 4;
pub const IBV_QPS_SQE: u32 = 5;
pub const IBV_QPS_ERR: u32 = 6;

// enum ibv_qp_type
pub const IBV_QPT_RC: u32 = 2;

// enum ibv_port_state
pub const IBV_PORT_ACTIVE: u32 = 4;

// anonymous IBV_LINK_LAYER_* enum (ibv_port_attr.link_layer)
pub const IBV_LINK_LAYER_UNSPECIFIED: u8 = 0;
pub const IBV_LINK_LAYER_INFINIBAND: u8 = 1;
pub const IBV_LINK_LAYER_ETHERNET: u8 = 2;
