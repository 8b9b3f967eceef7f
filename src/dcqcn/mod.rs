//! DCQCN pre-flight: reads mlx5 cc_params, ECN enables and congestion counters and checks them
//! against the site profile; also a reaction-point rate model for one QP.
