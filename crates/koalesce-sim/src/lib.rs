
pub mod network;
pub mod plot;
pub mod stats;
pub mod bench;
pub mod single_cluster;
pub mod swf;
pub mod background;
pub mod lrm;
pub mod rng;
pub mod engine;
pub mod metrics;
pub mod scenario;
pub mod workload;
