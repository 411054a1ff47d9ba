//! A mutation fuzzer for the parsers that read files users edit by hand or
//! in a spreadsheet: plan.csv and the profile TOML files. Each input is a
//! valid file mutated at random (bytes flipped, inserted, deleted, lines
//! duplicated or cut, separators and quotes added); every parse must return
//! Ok or an error naming the file, never panic.
//!
//! The suite runs a fixed, seeded number of cases; `./scripts/fuzz SECONDS`
//! runs it for as long as asked (VRAMPROBE_FUZZ_SECONDS), with fresh seeds.
#![cfg(feature = "builtin")]
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::time::{Duration, Instant};

/// xorshift64*: small, seeded, reproducible.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

const INTERESTING: &[&[u8]] = &[
    b",",
    b"\"",
    b"\n",
    b"\r\n",
    b"\xEF\xBB\xBF",
    b"\0",
    b"-",
    b"0",
    b"-1",
    b"99999999999999999999999",
    b"1e400",
    b"NaN",
    b"x",
    b"=",
    b"[",
    b"]",
    b"#",
    b"'",
    b"\\",
    b"\xff\xfe",
    b" ",
    b"3x",
    b"x0x",
    b"inf",
];

fn mutate(rng: &mut Rng, seed: &[u8]) -> Vec<u8> {
    let mut v = seed.to_vec();
    for _ in 0..=rng.below(6) {
        let at = rng.below(v.len() + 1);
        match rng.below(7) {
            0 if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] ^= 1 << rng.below(8);
            }
            1 => {
                let piece = INTERESTING[rng.below(INTERESTING.len())];
                v.splice(at..at, piece.iter().copied());
            }
            2 if !v.is_empty() => {
                let end = (at + rng.below(12)).min(v.len());
                v.drain(at.min(end)..end);
            }
            3 => v.truncate(at),
            4 => {
                // Duplicate a line.
                let text = String::from_utf8_lossy(&v).into_owned();
                let lines: Vec<&str> = text.lines().collect();
                if !lines.is_empty() {
                    let line = lines[rng.below(lines.len())].to_string() + "\n";
                    v.extend_from_slice(line.as_bytes());
                }
            }
            5 if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] = (rng.next() & 0xff) as u8;
            }
            _ => v.insert(at, b'0' + rng.below(10) as u8),
        }
    }
    v
}

const PLAN: &str = "schema_version,model,input,classes,device,device_name,mode,precision,optimizer,recommended_batch,fixed_bytes,per_sample_bytes\n2,resnet18,3x32x32,10,cpu,Xeon,train,fp32,sgd,48,134246016,282672\n1,gpt-nano,64,1000,cuda:0,H200,eval,bf16-amp,adamw,8,,\n";
const WORKLOAD: &str = "model = \"resnet18\"\ninput = \"3x32x32\"\nclasses = 10\nmode = \"train\"\nprecision = \"fp32\"\noptimizer = \"sgd\"\nlr = 0.1\n";
const GPU: &str = "name = \"RTX 3070\"\nmemory_bytes = 8589934592\ncontext_overhead_bytes = 536870912\noverhead_source = \"estimate\"\nbf16 = true\n";

/// Runs `parse` on mutations of `seed` for `cases` cases or until `deadline`.
fn fuzz(
    name: &str,
    seed: &str,
    rng: &mut Rng,
    cases: u64,
    deadline: Option<Instant>,
    parse: impl Fn(&[u8]) -> Option<String>,
) -> u64 {
    let mut errors = 0;
    let mut n = 0;
    while deadline.map_or(n < cases, |d| Instant::now() < d) {
        let input = mutate(rng, seed.as_bytes());
        let outcome = catch_unwind(AssertUnwindSafe(|| parse(&input)));
        match outcome {
            Ok(Some(message)) => {
                errors += 1;
                assert!(message.starts_with(name), "{name}: error without the file name: {message} for {input:?}");
            }
            Ok(None) => {}
            Err(_) => panic!("{name}: the parser panicked on {:?}", String::from_utf8_lossy(&input)),
        }
        n += 1;
    }
    eprintln!("{name}: {n} cases, {errors} rejected with an error, {} accepted, no panic", n - errors);
    n
}

#[test]
fn the_plan_and_profile_parsers_never_panic() {
    let seconds: Option<u64> = std::env::var("VRAMPROBE_FUZZ_SECONDS").ok().and_then(|s| s.parse().ok());
    let seed: u64 = std::env::var("VRAMPROBE_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5EED_CAFE);
    let deadline = seconds.map(|s| Instant::now() + Duration::from_secs(s) / 3);
    let cases = if seconds.is_some() { 0 } else { 3000 };
    let mut rng = Rng(seed | 1);
    // Quiet the default hook while panics are caught and reported here.
    std::panic::set_hook(Box::new(|_| {}));
    let plan = Path::new("plan.csv");
    fuzz("plan.csv", PLAN, &mut rng, cases, deadline, |b| {
        vramprobe::report::plan_file::parse(plan, b).err().map(|e| e.to_string())
    });
    let deadline = seconds.map(|s| Instant::now() + Duration::from_secs(s) / 3);
    let workload = Path::new("workload.toml");
    fuzz("workload.toml", WORKLOAD, &mut rng, cases, deadline, |b| {
        let text = std::str::from_utf8(b).ok()?;
        vramprobe::sweep::preset::parse_workload(workload, text).err().map(|e| e.to_string())
    });
    let deadline = seconds.map(|s| Instant::now() + Duration::from_secs(s) / 3);
    let gpu = Path::new("gpu.toml");
    fuzz("gpu.toml", GPU, &mut rng, cases, deadline, |b| {
        let text = std::str::from_utf8(b).ok()?;
        vramprobe::analyze::profile::parse_gpu(gpu, text).err().map(|e| e.to_string())
    });
    let _ = std::panic::take_hook();
}
