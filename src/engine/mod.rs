//! The sans-IO DQPLB engine: segmenting, QP scheduling policies, CQE-driven refill and in-order
//! completion, as pure state machines driven by transports and tests (no I/O, clocks or unsafe).
