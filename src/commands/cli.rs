//! Command-line definitions only (clap derive). Values are validated here,
//! so a malformed option is a usage error (exit code 2) before anything runs.
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::analyze::search::StrategyKind;
use crate::error::UsageError;
use crate::measure::spread::Via;
use crate::record::device::DeviceRequest;
use crate::record::subject::{Launcher, Nodes};
use crate::record::workload::{Mode, OptimizerKind, Precision};
use crate::sweep::subjects::WorkloadOptions;
use crate::units;

#[derive(Debug, Parser)]
#[command(
    name = "vramprobe",
    version,
    about = "How large a training batch your GPU can hold, and why: measured with real training steps.",
    after_help = "Examples:\n  vramprobe sweep --model resnet18\n  vramprobe sweep --model resnet50 --device cuda:0 --optimizer sgd --multiple-of 8\n  vramprobe check --plan runs/X/plan.csv\n  vramprobe train --plan runs/X/plan.csv --target-batch 256\n  vramprobe report runs/X\n  vramprobe models\n  vramprobe devices"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run real training steps across batch sizes, fit memory against the batch,
    /// and recommend the largest batch that fits with headroom.
    #[command(
        after_help = "Examples:\n  vramprobe sweep --model resnet18\n  vramprobe sweep --model resnet18 --input 3x112x112 --capacity 4GiB --multiple-of 8\n  vramprobe sweep --model resnet18 --input 3x112x112 --batches 1,2,4,8\n  vramprobe sweep --model resnet18 --input 3x64x64 --capacity 2GiB --strategy lightning-binsearch\n  vramprobe sweep --model vgg16 --capacity 8GiB --margin 15% --out runs/vgg16-8g\n  vramprobe sweep --capacity 8GiB -- python train.py --batch-size {batch}\n  vramprobe sweep --parallel 4 -- python train.py --batch-size {batch}   # 4 trials at once, one per idle GPU\n  vramprobe sweep --nodes 2 --launcher slurm -- torchrun --nproc-per-node 8 train.py --batch-size {batch}"
    )]
    Sweep(SweepArgs),
    /// List the built-in models with their default input and parameter count.
    #[command(after_help = "Example:\n  vramprobe models")]
    Models(ListArgs),
    /// List this machine's devices with total memory and versions.
    #[command(after_help = "Example:\n  vramprobe devices")]
    Devices(ListArgs),
    /// Compare every search strategy on the same cases (real CPU measurements
    /// and SYNTHETIC curves); run by ./scripts/bench-search.
    #[command(hide = true)]
    BenchSearch(BenchArgs),
    /// Train with a plan's recommended batch: gradient accumulation to the target
    /// effective batch, and OOM back-off that keeps the effective batch.
    #[command(
        after_help = "Examples:\n  vramprobe train --plan runs/X/plan.csv --target-batch 256 --steps 100 --log train.csv\n  vramprobe train --plan plan.csv --data cifar-10-batches-bin --epochs 2 --checkpoint run.ckpt\n  vramprobe train --plan plan.csv --resume run.ckpt --epochs 4 --checkpoint run.ckpt"
    )]
    Train(TrainArgs),
    /// Pre-flight check: run a few real steps at exactly one configuration and
    /// say whether it fits (exit 0), or not (exit 3).
    #[command(
        after_help = "Exit codes: 0 fits, 3 won't fit, 1 runtime error, 2 usage error.\n\nExamples:\n  vramprobe check --plan runs/X/plan.csv\n  vramprobe check --model resnet50 --batch 64 --capacity 8GiB --quiet && python train.py\n  vramprobe check --plan plan-gpus.csv --row 3 --json"
    )]
    Check(CheckArgs),
    /// Run your full job at a plan's batch, unmeasured: {batch} becomes the
    /// recommended batch and {accumulation} the micro-batches per optimizer
    /// step that keep --target-batch.
    #[command(
        after_help = "Examples:\n  vramprobe exec --plan runs/X/plan.csv -- python train.py --batch-size {batch}\n  vramprobe exec --plan runs/X/plan.csv --target-batch 256 -- python train.py --batch-size {batch} --grad-accum {accumulation}\n  vramprobe exec --plan runs/X/plan.csv --watch off -- python train.py --batch-size {batch}"
    )]
    Exec(ExecArgs),
    /// Predict the max batch on GPUs you do not have, from a measured run.
    #[command(
        after_help = "Examples:\n  vramprobe plan --from runs/X/report.json --gpu rtx3070\n  vramprobe plan --from runs/X/report.json --gpu all --multiple-of 8\n  vramprobe plan --from runs/X/report.json --gpu my-gpu.toml\n  vramprobe plan --from runs/X/report.json --gpu h100-80gb --explain --at 256,512\n  vramprobe plan --from runs/fsdp --world-size 64,128"
    )]
    Plan(PlanArgs),
    /// Re-render a saved run's table, plots and HTML page from its report.json,
    /// without measuring again.
    #[command(
        after_help = "Examples:\n  vramprobe report runs/20261203-081500-resnet18\n  vramprobe report runs/X --quiet   # rewrite the files, print nothing"
    )]
    Report(ReportArgs),
    /// Print a shell completion script.
    #[command(
        after_help = "Examples:\n  vramprobe completions bash > ~/.local/share/bash-completion/completions/vramprobe\n  vramprobe completions zsh > ~/.zfunc/_vramprobe\n  vramprobe completions fish > ~/.config/fish/completions/vramprobe.fish"
    )]
    Completions(CompletionsArgs),
    /// Internal: one trial, run by `sweep` in a child process.
    #[command(hide = true)]
    Trial(TrialArgs),
    /// Internal: a trial of a torchrun job across nodes: its agents, started
    /// here (or over ssh), or as one task of `srun` (--agent).
    #[command(hide = true)]
    Launch(LaunchArgs),
}

#[derive(Debug, Clone, Args)]
pub struct LaunchArgs {
    #[arg(long)]
    pub nodes: u32,
    /// The rendezvous, host:port.
    #[arg(long)]
    pub endpoint: String,
    /// The rendezvous id (the trial's).
    #[arg(long)]
    pub id: String,
    /// Start the agents on these hosts over ssh, one each.
    #[arg(long, value_delimiter = ',')]
    pub hosts: Vec<String>,
    /// One task of `srun`: become this node's agent.
    #[arg(long)]
    pub agent: bool,
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

#[derive(Debug, Clone, Args)]
pub struct WorkloadArgs {
    /// Built-in model name (see `vramprobe models`), or a TorchScript file
    /// (scripts/export_torchscript.py makes one from any nn.Module).
    #[arg(long)]
    pub model: Option<String>,
    /// Input shape per sample, channels x height x width [default: the model's own; required for a TorchScript file].
    #[arg(long, value_name = "CxHxW", value_parser = parse_input)]
    pub input: Option<InputShape>,
    /// Tokens per sequence, for token models such as gpt2-small [default: the model's context].
    #[arg(long, conflicts_with = "input", allow_hyphen_values = true, value_parser = parse_seq_len)]
    pub seq_len: Option<i64>,
    /// fp32, bf16 (the model in bfloat16), fp16-amp or bf16-amp (autocast; fp16 with loss scaling).
    /// A sweep takes a list, e.g. fp32,bf16-amp: one row each [default: fp32].
    #[arg(long, value_enum, value_delimiter = ',')]
    pub precision: Vec<Precision>,
    /// train (forward, backward, optimizer step) or eval (forward without gradients,
    /// for inference batch sizes). A sweep takes a list, e.g. train,eval [default: train].
    #[arg(long, value_enum, value_delimiter = ',')]
    pub mode: Vec<Mode>,
    /// Number of classes [default: the model's own, 1000 for ImageNet models].
    #[arg(long, value_parser = clap::value_parser!(i64).range(1..), allow_negative_numbers = true)]
    pub classes: Option<i64>,
    /// Optimizer, with PyTorch's defaults (SGD with momentum 0.9) [default: adam].
    /// A sweep takes a list, e.g. sgd,adam: one row each (the "why" block then
    /// sets its predicted optimizer change beside the measured one).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub optimizer: Vec<OptimizerKind>,
    /// Learning rate [default: 0.001].
    #[arg(long, allow_hyphen_values = true, value_parser = parse_lr)]
    pub lr: Option<f64>,
}

impl WorkloadArgs {
    /// The options as the resolver below the commands takes them.
    pub fn options(&self) -> WorkloadOptions {
        WorkloadOptions {
            model: self.model.clone(),
            input: self.input.clone().map(|i| i.0),
            seq_len: self.seq_len,
            classes: self.classes,
            optimizers: self.optimizer.clone(),
            lr: self.lr,
            precisions: self.precision.clone(),
            modes: self.mode.clone(),
        }
    }
}

#[derive(Debug, Clone, Args)]
pub struct SweepArgs {
    #[command(flatten)]
    pub workload: WorkloadArgs,
    /// A workload preset (profiles/models/*.toml); options given here override it.
    #[arg(long, required_unless_present_any = ["model", "command"], conflicts_with = "command")]
    pub profile: Option<PathBuf>,
    /// auto (first CUDA device, else the CPU), cpu, cuda, cuda:N, or all (every
    /// GPU at once, one child per device, and the smallest batch among them).
    #[arg(long, default_value = "auto", value_parser = parse_device)]
    pub device: DeviceRequest,
    /// How to search for the largest batch: vramprobe's fit-guided search, or
    /// a peer's strategy to compare with.
    #[arg(long, value_enum, default_value_t = StrategyKind::Vramprobe)]
    pub strategy: StrategyKind,
    /// Token models: sweep each of these sequence lengths and fit memory against
    /// batch and length together, e.g. 128,256,512,1024.
    #[arg(long, conflicts_with_all = ["seq_len", "input"], value_parser = parse_seq_lens)]
    pub seq_lens: Option<SeqLens>,
    /// Distributed commands: sweep at each of these world sizes, put where
    /// the command has {nproc} (e.g. torchrun --nproc-per-node {nproc}), and
    /// predict the per-rank max batch at larger ones, e.g. 1,2.
    #[arg(long, value_parser = parse_world_sizes, requires = "command")]
    pub world_sizes: Option<WorldSizes>,
    /// Run exactly these batch sizes instead of searching, e.g. 1,2,4,8.
    #[arg(long, allow_hyphen_values = true, value_parser = parse_batches, conflicts_with = "strategy")]
    pub batches: Option<Batches>,
    /// Stop the search once the max is known to within this many batches
    /// [default: 0, exact].
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64), allow_negative_numbers = true)]
    pub tolerance: u64,
    /// Largest batch to run [default: none on CUDA or with --capacity; 64 on the CPU otherwise, where steps are slow].
    #[arg(long, allow_hyphen_values = true, value_parser = parse_batch)]
    pub max_batch: Option<u64>,
    /// Training steps per trial: every batch reported as fitting ran this many
    /// (at least 2: the optimizer state appears during the first step).
    #[arg(long, visible_alias = "steps", default_value_t = 3, value_parser = clap::value_parser!(u32).range(2..=1000), allow_negative_numbers = true)]
    pub verify_steps: u32,
    /// Memory to plan for instead of the device's total, e.g. 6GiB or 8GB.
    #[arg(long, allow_hyphen_values = true, value_parser = parse_bytes)]
    pub capacity: Option<u64>,
    /// Share of the capacity kept free, e.g. 10% or 0.1.
    #[arg(long, default_value = "10%", allow_hyphen_values = true, value_parser = parse_margin)]
    pub margin: f64,
    /// Round the recommended batch down to a multiple of this (8 suits tensor cores).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..), allow_negative_numbers = true)]
    pub multiple_of: u64,
    #[command(flatten)]
    pub nodes: NodesArgs,
    /// Trials to run at once, each in its own process: on CUDA one per GPU,
    /// on other idle GPUs of the device's kind [default: every such GPU; 1
    /// on the CPU]. The search proposes as many probes a round (the next
    /// and those each outcome would lead to) and decides exactly as it
    /// would one trial at a time.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=64), allow_negative_numbers = true)]
    pub parallel: Option<u32>,
    /// Seconds before a trial that has not finished is killed.
    #[arg(long, value_name = "SECONDS", default_value_t = 600, value_parser = clap::value_parser!(u64).range(1..), allow_negative_numbers = true)]
    pub trial_timeout: u64,
    /// A command's max is rehearsed over its whole job (every phase, each DataLoader cut
    /// short); the rehearsal stops at its next batch or training step after this long.
    #[arg(long, value_name = "SECONDS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..), allow_negative_numbers = true)]
    pub rehearsal_time: u64,
    /// Rehearse a command's max over its whole job. `off` gives the
    /// training step's max alone, and says that the whole job was not
    /// rehearsed (`vramprobe check` it before a long run).
    #[arg(long, value_enum, value_name = "WHEN", default_value = "on", num_args = 0..=1, default_missing_value = "on")]
    pub rehearsal: OnOff,
    /// Output folder [default: a new folder runs/<time>-<model>]. An existing
    /// folder that holds files is refused unless --force.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Write into an existing --out folder (its files are replaced).
    #[arg(long)]
    pub force: bool,
    /// Break the max batch's peak down by category (parameters, gradients,
    /// optimizer state, activations...) and say why the batch stops there.
    /// Free for a built-in model; for a command, one extra trial at the max
    /// under torch's full memory profile. `off` skips it (as do
    /// --no-breakdown and VRAMPROBE_BREAKDOWN=0).
    #[arg(long, value_enum, value_name = "WHEN", default_value = "on", num_args = 0..=1, default_missing_value = "on")]
    pub breakdown: OnOff,
    /// The same as --breakdown off.
    #[arg(long, conflicts_with = "breakdown")]
    pub no_breakdown: bool,
    /// Start every trial of a `python script.py` command as a fresh
    /// process, importing everything again, instead of forking it from one
    /// interpreter that imported torch and the script's imports once.
    #[arg(long, requires = "command")]
    pub fresh_process: bool,
    /// Print only the summary, not a line per trial.
    #[arg(long, short)]
    pub quiet: bool,
    /// After the summary, print where the sweep's wall time went: the
    /// imports, each trial's setup, steps and finish, the rehearsals, the
    /// analysis (report.json keeps it as "timings" either way).
    #[arg(long)]
    pub timings: bool,
    /// Your own training command, after `--`, with {batch} where the batch
    /// size goes: each trial runs it unmodified, measured by vramprobe's
    /// Python hook, e.g. -- python train.py --batch-size {batch}.
    #[arg(last = true, value_name = "COMMAND", conflicts_with = "model")]
    pub command: Vec<String>,
}

#[derive(Debug, Clone, Args)]
pub struct TrainArgs {
    /// A plan.csv written by `vramprobe sweep`.
    #[arg(long)]
    pub plan: PathBuf,
    /// Which plan row to train (1-based) [default: the only row].
    #[arg(long, conflicts_with = "model", value_parser = clap::value_parser!(u64).range(1..), allow_negative_numbers = true)]
    pub row: Option<u64>,
    /// Train the plan's row for this model.
    #[arg(long)]
    pub model: Option<String>,
    /// Samples per optimizer step, reached by gradient accumulation [default: the recommended batch].
    #[arg(long, allow_hyphen_values = true, value_parser = parse_batch)]
    pub target_batch: Option<u64>,
    /// Optimizer steps to run in total (a resumed run counts the steps already done).
    #[arg(long, conflicts_with = "epochs", value_parser = clap::value_parser!(u64).range(1..), allow_negative_numbers = true)]
    pub steps: Option<u64>,
    /// Epochs over the data [default: 1].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..), allow_negative_numbers = true)]
    pub epochs: Option<u64>,
    /// A folder of CIFAR-10 binary files (data_batch_*.bin) [default: SYNTHETIC data].
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Learning rate.
    #[arg(long, default_value_t = 1e-3, allow_hyphen_values = true, value_parser = parse_lr)]
    pub lr: f64,
    /// Write the training log (CSV) here.
    #[arg(long)]
    pub log: Option<PathBuf>,
    /// Log loss, speed and memory every N optimizer steps.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..), allow_negative_numbers = true)]
    pub log_every: u64,
    /// Save a checkpoint here: at the end, every --checkpoint-every steps, and before stopping on an error.
    #[arg(long)]
    pub checkpoint: Option<PathBuf>,
    #[arg(long, requires = "checkpoint", value_parser = clap::value_parser!(u64).range(1..), allow_negative_numbers = true)]
    pub checkpoint_every: Option<u64>,
    /// Continue from a checkpoint.
    #[arg(long)]
    pub resume: Option<PathBuf>,
    /// Device [default: the plan's].
    #[arg(long, value_parser = parse_device)]
    pub device: Option<DeviceRequest>,
    /// On the CPU: a real memory limit inside libtorch (an OOM past it, as on a GPU).
    #[arg(long, allow_hyphen_values = true, value_parser = parse_bytes)]
    pub capacity: Option<u64>,
    /// After this many steps without an OOM, try doubling a backed-off micro-batch again.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..), allow_negative_numbers = true)]
    pub reprobe_after: Option<u64>,
    /// Seed for the data order, dropout and SYNTHETIC data.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// No progress or event lines on stderr.
    #[arg(long, short)]
    pub quiet: bool,
}

#[derive(Debug, Clone, Args)]
pub struct CheckArgs {
    /// A plan.csv (from sweep or plan) to check: its recommended batch.
    #[arg(long, conflicts_with_all = ["model", "batch"])]
    pub plan: Option<PathBuf>,
    /// Which plan row (1-based) [default: the only row].
    #[arg(long, requires = "plan", value_parser = clap::value_parser!(u64).range(1..), allow_negative_numbers = true)]
    pub row: Option<u64>,
    #[command(flatten)]
    pub workload: WorkloadArgs,
    /// The batch to check (with --model).
    #[arg(long, allow_hyphen_values = true, value_parser = parse_batch)]
    pub batch: Option<u64>,
    /// auto, cpu, cuda or cuda:N [default: the plan's, or auto].
    #[arg(long, value_parser = parse_device)]
    pub device: Option<DeviceRequest>,
    /// Check only the first N training steps [default for a built-in model: 3]. Without it
    /// your command's whole job is rehearsed: training, evaluation, checkpoints, every epoch's
    /// start, each DataLoader cut to a few batches, and memory that grows projected to its end.
    #[arg(long, value_parser = clap::value_parser!(u32).range(2..=1000), allow_negative_numbers = true)]
    pub steps: Option<u32>,
    /// A command's rehearsal stops at its next batch or training step after this long.
    #[arg(long, value_name = "SECONDS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..), allow_negative_numbers = true)]
    pub rehearsal_time: u64,
    /// Emulate a device of this size (the CPU: a real limit; CUDA: the allocator's fraction).
    #[arg(long, allow_hyphen_values = true, value_parser = parse_bytes)]
    pub capacity: Option<u64>,
    /// Warn when less than this share of the capacity stays free.
    #[arg(long, default_value = "10%", allow_hyphen_values = true, value_parser = parse_margin)]
    pub margin: f64,
    #[arg(long, value_name = "SECONDS", default_value_t = 600, value_parser = clap::value_parser!(u64).range(1..), allow_negative_numbers = true)]
    pub trial_timeout: u64,
    /// Print nothing; the exit code is the answer.
    #[arg(long, short, conflicts_with = "json")]
    pub quiet: bool,
    /// Print the verdict as one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Also break the peak down by category (for a command, the trial runs
    /// under torch's full memory profile, which takes longer).
    #[arg(long, value_enum, value_name = "WHEN", default_value = "off", num_args = 0..=1, default_missing_value = "on")]
    pub breakdown: OnOff,
    /// What {nproc} in the command becomes: the number of ranks.
    #[arg(long, value_parser = parse_world_size, requires = "command")]
    pub world_size: Option<u32>,
    #[command(flatten)]
    pub nodes: NodesArgs,
    /// Your own training command, after `--`, with {batch} where the batch
    /// size goes (with --batch), e.g. -- python train.py --batch-size {batch}.
    #[arg(last = true, value_name = "COMMAND", conflicts_with_all = ["model", "plan"], requires = "batch")]
    pub command: Vec<String>,
}

/// A switch given as `--flag on` or `--flag off` (`--flag` alone is on).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OnOff {
    On,
    Off,
}

impl OnOff {
    /// Whether the switch is on, with `VRAMPROBE_BREAKDOWN=0` turning the
    /// breakdown off as the older environment switch did.
    pub fn breakdown_on(self) -> bool {
        self == OnOff::On && std::env::var("VRAMPROBE_BREAKDOWN").as_deref() != Ok("0")
    }
}

#[derive(Debug, Clone, Args)]
pub struct ExecArgs {
    /// A plan.csv written by `vramprobe sweep`.
    #[arg(long)]
    pub plan: PathBuf,
    /// Which plan row (1-based) [default: the only row].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..), allow_negative_numbers = true)]
    pub row: Option<u64>,
    /// Samples per optimizer step to keep, through {accumulation} [default: the recommended batch].
    #[arg(long, allow_hyphen_values = true, value_parser = parse_batch)]
    pub target_batch: Option<u64>,
    /// Watch the job to its end: each phase's peak, a warning when memory
    /// held grows toward the plan's budget, and a post-mortem (with a CUDA
    /// memory snapshot) on an out-of-memory error. `off` runs the job bare.
    #[arg(long, value_enum, value_name = "WHEN", default_value = "on", num_args = 0..=1, default_missing_value = "on")]
    pub watch: OnOff,
    /// The run folder for the watch's records [default: exec-<time> beside the plan].
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Write into an existing --out folder.
    #[arg(long)]
    pub force: bool,
    /// The command to run, after `--` [default: the plan row's own command].
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

#[derive(Debug, Clone, Args)]
pub struct PlanArgs {
    /// A report.json written by `vramprobe sweep`; with --world-size, a
    /// `--world-sizes` sweep's folder (or its run.json).
    #[arg(long)]
    pub from: PathBuf,
    /// A GPU profile id (see profiles/gpus), `all`, or a path to a profile .toml.
    #[arg(long, required_unless_present = "world_size", conflicts_with = "world_size")]
    pub gpu: Option<String>,
    /// World sizes (ranks in all, e.g. 64 for 8 nodes of 8 GPUs) to predict
    /// the per-rank batch at, from a `--world-sizes` sweep's fit, e.g. 64,128.
    #[arg(long, value_parser = parse_world_sizes)]
    pub world_size: Option<WorldSizes>,
    /// Share of each GPU's memory kept free [default: the run's margin].
    #[arg(long, allow_hyphen_values = true, value_parser = parse_margin)]
    pub margin: Option<f64>,
    /// Round the recommended batch down to a multiple of this.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..), allow_negative_numbers = true)]
    pub multiple_of: u64,
    /// Where to write the plan rows [default: plan-gpus.csv beside the report].
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Show the predicted device memory part by part (reserved, cuBLAS
    /// workspace, CUDA context) at the recommended batch, and write them
    /// to plan-gpus-memory.csv beside the plan rows.
    #[arg(long)]
    pub explain: bool,
    /// With --explain: also at these batches, e.g. 32,64,128.
    #[arg(long, requires = "explain", allow_hyphen_values = true, value_parser = parse_batches)]
    pub at: Option<Batches>,
}

#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// Where to write the per-(case, strategy) rows.
    #[arg(long, default_value = "bench/search.csv")]
    pub out: PathBuf,
    /// Only the SYNTHETIC curves (seconds instead of minutes).
    #[arg(long)]
    pub synthetic_only: bool,
    /// Reuse real measurements recorded by an earlier run (its
    /// real-measurements.csv) instead of measuring them again.
    #[arg(long, conflicts_with = "synthetic_only")]
    pub reuse: Option<PathBuf>,
}

#[derive(Debug, Clone, Args)]
pub struct ReportArgs {
    /// A run folder written by `vramprobe sweep` (it holds report.json, or one
    /// folder per variant that does).
    pub dir: PathBuf,
    /// Rewrite the files without printing the summary.
    #[arg(long, short)]
    pub quiet: bool,
}

#[derive(Debug, Clone, Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Debug, Clone, Args)]
pub struct ListArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Args)]
pub struct TrialArgs {
    /// The parent's trial spec: the records go beside it (the trial protocol).
    #[arg(long, conflicts_with_all = ["device", "batch", "json"])]
    pub spec: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub workload: WorkloadArgs,
    #[arg(long, value_parser = parse_device)]
    pub device: Option<DeviceRequest>,
    #[arg(long, allow_hyphen_values = true, value_parser = parse_batch)]
    pub batch: Option<u64>,
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(2..=1000), allow_negative_numbers = true)]
    pub steps: u32,
    /// A real memory limit for libtorch on the CPU, in bytes.
    #[arg(long, value_parser = parse_bytes)]
    pub cpu_limit: Option<u64>,
    /// By hand: stream one JSON record per line on stdout.
    #[arg(long)]
    pub json: bool,
}

/// `--launcher`'s values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LauncherKind {
    Local,
    Slurm,
    Ssh,
    Ray,
}

/// Where trials run past this host (sweep, check): a torchrun job across
/// nodes, or each trial placed by a scheduler.
#[derive(Debug, Clone, Args)]
pub struct NodesArgs {
    /// A torchrun job across nodes: each trial starts one torchrun agent per
    /// node, joined by a c10d rendezvous vramprobe sets up (--nnodes,
    /// --node-rank, --rdzv-endpoint), and every rank of every node is measured.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(2..=1024))]
    pub nodes: Option<u32>,
    /// With --nodes, how the agents start: local (all on this host, to
    /// rehearse), slurm (srun, one task per node, inside an allocation), ssh
    /// (--hosts). Without it: slurm runs each trial as a job step of the
    /// allocation (srun --exact), ray as a task on a running Ray cluster;
    /// --parallel N of them at once.
    #[arg(long, value_enum, default_value_t = LauncherKind::Local)]
    pub launcher: LauncherKind,
    /// With --launcher ssh: the hosts, one per node, the first holding the rendezvous.
    #[arg(long, value_delimiter = ',', requires = "nodes")]
    pub hosts: Vec<String>,
}

impl NodesArgs {
    /// `--nodes`, `--launcher` and `--hosts` as the subject takes them.
    pub fn nodes(&self) -> Result<Option<Nodes>, UsageError> {
        let Some(count) = self.nodes else { return Ok(None) };
        let launcher = match self.launcher {
            LauncherKind::Local => Launcher::Local,
            LauncherKind::Slurm => {
                in_allocation()?;
                Launcher::Slurm
            }
            LauncherKind::Ssh if self.hosts.len() != count as usize => {
                return Err(UsageError::new(format!("--launcher ssh needs --hosts with one host per node ({count})")))
            }
            LauncherKind::Ssh => Launcher::Ssh { hosts: self.hosts.clone() },
            LauncherKind::Ray => return Err(UsageError::new(
                "--launcher ray runs independent trials as Ray tasks; a job across --nodes takes local, slurm or ssh",
            )),
        };
        Ok(Some(Nodes { count, launcher }))
    }

    /// Where each trial starts when it is not a job across nodes.
    pub fn via(&self) -> Result<Via, UsageError> {
        Ok(match (self.nodes, self.launcher) {
            (Some(_), _) | (None, LauncherKind::Local) => Via::Here,
            (None, LauncherKind::Slurm) => {
                in_allocation()?;
                Via::SlurmStep
            }
            (None, LauncherKind::Ray) => Via::RayTask,
            (None, LauncherKind::Ssh) => {
                return Err(UsageError::new("--launcher ssh starts a job across nodes: give --nodes N and --hosts"))
            }
        })
    }
}

fn in_allocation() -> Result<(), UsageError> {
    match std::env::var_os("SLURM_JOB_ID") {
        Some(_) => Ok(()),
        None => Err(UsageError::new(
            "--launcher slurm runs inside a Slurm allocation (SLURM_JOB_ID is not set): salloc --nodes N first",
        )),
    }
}

/// A parsed `--input` shape (a newtype so clap treats it as one value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputShape(pub Vec<i64>);

/// A parsed `--seq-lens` list (a newtype so clap treats it as one value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeqLens(pub Vec<i64>);

/// A parsed `--world-sizes` list (a newtype so clap treats it as one value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorldSizes(pub Vec<u32>);

/// A parsed `--batches` list (a newtype so clap treats it as one value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batches(pub Vec<u64>);

fn parse_input(s: &str) -> Result<InputShape, String> {
    units::parse_input(s).map(InputShape).map_err(|e| e.to_string())
}

fn parse_batches(s: &str) -> Result<Batches, String> {
    units::parse_batches(s).map(Batches).map_err(|e| e.to_string())
}

fn parse_seq_len(s: &str) -> Result<i64, String> {
    match s.trim().parse::<i64>() {
        Ok(v) if v >= 1 => Ok(v),
        _ => Err(format!("invalid sequence length '{s}': expected a whole number of tokens, at least 1")),
    }
}

fn parse_seq_lens(s: &str) -> Result<SeqLens, String> {
    let mut lens = s.split(',').map(parse_seq_len).collect::<Result<Vec<_>, _>>()?;
    lens.sort_unstable();
    lens.dedup();
    if lens.len() < 2 {
        return Err(format!("invalid --seq-lens '{s}': give at least two lengths, e.g. 128,256,512"));
    }
    Ok(SeqLens(lens))
}

fn parse_world_size(s: &str) -> Result<u32, String> {
    match s.trim().parse::<u32>() {
        Ok(v) if (1..=65536).contains(&v) => Ok(v),
        _ => Err(format!("invalid world size '{s}': expected a number of ranks, 1 to 65536")),
    }
}

fn parse_world_sizes(s: &str) -> Result<WorldSizes, String> {
    let mut sizes = s.split(',').map(parse_world_size).collect::<Result<Vec<_>, _>>()?;
    sizes.sort_unstable();
    sizes.dedup();
    Ok(WorldSizes(sizes))
}

fn parse_batch(s: &str) -> Result<u64, String> {
    units::parse_batch(s).map_err(|e| e.to_string())
}

fn parse_bytes(s: &str) -> Result<u64, String> {
    units::parse_bytes(s).map_err(|e| e.to_string())
}

fn parse_device(s: &str) -> Result<DeviceRequest, String> {
    s.parse().map_err(|e: crate::error::UsageError| e.to_string())
}

fn parse_lr(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("invalid learning rate '{s}': expected a positive number such as 0.001")),
    }
}

fn parse_margin(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let value = match t.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().map(|v| v / 100.0),
        None => t.parse::<f64>(),
    };
    match value {
        Ok(v) if (0.0..1.0).contains(&v) => Ok(v),
        _ => Err(format!("invalid margin '{s}': expected a share below 100%, e.g. 10% or 0.1")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn margins_accept_percent_and_fraction() {
        assert_eq!(parse_margin("10%").unwrap(), 0.10);
        assert_eq!(parse_margin("0.25").unwrap(), 0.25);
        assert_eq!(parse_margin("0").unwrap(), 0.0);
        for bad in ["100%", "1", "-5%", "ten", ""] {
            assert!(parse_margin(bad).is_err(), "{bad} was accepted");
        }
    }

    #[test]
    fn cli_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}

/// `--precision`, `--mode`, `--optimizer` and `--strategy` values, with
/// their help: the command line's business, so defined here, over the
/// names the types themselves use everywhere else.
mod values {
    use clap::builder::PossibleValue;
    use clap::ValueEnum;

    use crate::analyze::search::StrategyKind;
    use crate::record::workload::OptimizerKind;
    use crate::record::workload::{Mode, Precision};

    impl ValueEnum for Precision {
        fn value_variants<'a>() -> &'a [Self] {
            &Precision::ALL
        }

        fn to_possible_value(&self) -> Option<PossibleValue> {
            Some(PossibleValue::new(self.name()).help(match self {
                Precision::Fp32 => "Everything in float32 (PyTorch's default)",
                Precision::Bf16 => "Parameters, activations and optimizer state in bfloat16 (`model.bfloat16()`)",
                Precision::Fp16Amp => {
                    "float32 parameters, float16 autocast and a dynamic loss scale (`torch.autocast` + `GradScaler`)"
                }
                Precision::Bf16Amp => {
                    "float32 parameters, bfloat16 autocast in forward and the loss (no scaling needed)"
                }
            }))
        }
    }

    impl ValueEnum for Mode {
        fn value_variants<'a>() -> &'a [Self] {
            &Mode::ALL
        }

        fn to_possible_value(&self) -> Option<PossibleValue> {
            Some(PossibleValue::new(self.name()).help(match self {
                Mode::Train => "Forward, loss, backward and the optimizer step",
                Mode::Eval => "Forward only, without gradients, the model in eval mode: for inference batch sizes",
            }))
        }
    }

    impl ValueEnum for OptimizerKind {
        fn value_variants<'a>() -> &'a [Self] {
            &OptimizerKind::ALL
        }

        fn to_possible_value(&self) -> Option<PossibleValue> {
            Some(PossibleValue::new(self.name()))
        }
    }

    impl ValueEnum for StrategyKind {
        fn value_variants<'a>() -> &'a [Self] {
            &StrategyKind::ALL
        }

        fn to_possible_value(&self) -> Option<PossibleValue> {
            Some(PossibleValue::new(self.name()).help(match self {
                StrategyKind::Vramprobe => "Fit-guided: few small probes, fit, probe the prediction, refine, verify",
                StrategyKind::LightningPower => "PyTorch Lightning `scale_batch_size(mode=\"power\")`",
                StrategyKind::LightningBinsearch => "PyTorch Lightning `scale_batch_size(mode=\"binsearch\")`",
                StrategyKind::Accelerate => "HuggingFace Accelerate `find_executable_batch_size`",
            }))
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn the_command_line_offers_each_types_own_names() {
            for p in Precision::ALL {
                assert_eq!(p.to_possible_value().unwrap().get_name(), p.name());
            }
            for m in Mode::ALL {
                assert_eq!(m.to_possible_value().unwrap().get_name(), m.name());
            }
            for o in OptimizerKind::ALL {
                assert_eq!(o.to_possible_value().unwrap().get_name(), o.name());
            }
            for k in StrategyKind::ALL {
                assert_eq!(k.to_possible_value().unwrap().get_name(), k.name());
            }
        }
    }
}
