//! Pure functions over measurements: the memory line and its budget
//! ([`fit`]), the 2-D batch x length fit ([`seqfit`]), the batch-size search
//! strategies and the peers' ([`search`]), a step's trace scaled to a batch
//! not run ([`trace_scale`]) and a CPU run's reserved bytes on a GPU at
//! batches not run ([`device_curve`]), the sweep's conclusions
//! ([`analysis`]: max, recommended and fastest batch), GPU profiles and what
//! a measured line predicts on them ([`profile`], [`whatif`], part by part
//! in [`device_memory`]), and how a
//! distributed job's line changes with its world size ([`worldfit`]), and a
//! whole job's peak from its rehearsal ([`whole_job`]), and the batch that
//! would have fit a job that ran out of memory ([`postmortem`]).
//!
//! No I/O beyond reading a GPU profile file, no libtorch, no processes: unit
//! tested on their own. Layer 4, beside `measure` (neither imports the
//! other): may import only `record` (the measured values), `units` and
//! `error`.
pub mod analysis;
pub mod device_curve;
pub mod device_memory;
pub mod fastest;
pub mod fit;
pub mod note;
pub mod postmortem;
pub mod profile;
pub mod run;
pub mod search;
pub mod seqfit;
pub mod trace_scale;
pub mod traced_max;
pub mod whatif;
pub mod whole_job;
pub mod why;
pub mod worldfit;
