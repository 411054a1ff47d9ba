//! A torchrun job across nodes as one trial: one torchrun agent per node,
//! each the job's own torchrun with the rendezvous flags vramprobe adds
//! (`--nnodes N --node-rank R --rdzv-backend c10d --rdzv-endpoint H:P
//! --rdzv-id ID`), started by the launcher the user names: on this host
//! (`local`), through `srun` inside a Slurm allocation, or over `ssh`.
//! The trial's child is `vramprobe launch`, which starts the agents and,
//! when one fails, stops the others, so no process outlives a failed trial
//! on any node. Every rank writes its records into the trial's folder
//! (on a cluster, a folder every node shares).
use std::net::{TcpListener, ToSocketAddrs};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

use crate::record::subject::{Launcher, Nodes};

/// torchrun's options that vramprobe sets for a job across nodes.
const SET_HERE: [&str; 6] =
    ["--nnodes", "--node-rank", "--node_rank", "--rdzv-endpoint", "--rdzv_endpoint", "--master-addr"];

/// Where torchrun's own options begin in `argv`: after `torchrun`, or
/// after `-m torch.distributed.run` (or `.launch`).
pub fn torchrun_options_at(argv: &[String]) -> Option<usize> {
    let name = |a: &String| a.rsplit('/').next().unwrap_or(a).to_string();
    if argv.first().is_some_and(|a| name(a) == "torchrun") {
        return Some(1);
    }
    let m = argv.iter().position(|a| a == "-m")?;
    let module = argv.get(m + 1)?;
    ["torch.distributed.run", "torch.distributed.launch"].contains(&module.as_str()).then_some(m + 2)
}

/// Why `argv` cannot be a job across nodes, if it cannot.
pub fn refuse(argv: &[String]) -> Option<String> {
    if torchrun_options_at(argv).is_none() {
        return Some(
            "--nodes needs a torchrun command (torchrun ... or python -m torch.distributed.run ...): \
                     vramprobe starts one torchrun agent per node"
                .into(),
        );
    }
    let given = argv.iter().find(|a| SET_HERE.iter().any(|o| a.as_str() == *o || a.starts_with(&format!("{o}="))))?;
    Some(format!("--nodes: leave {given} out of the command; vramprobe sets the nodes and the rendezvous itself"))
}

/// One agent's argv: the job's torchrun without `--standalone`, with the
/// rendezvous flags of node `node_rank` of `nodes`.
pub fn agent_argv(argv: &[String], nodes: u32, node_rank: u32, endpoint: &str, id: &str) -> Vec<String> {
    let at = torchrun_options_at(argv).unwrap_or(1);
    let added = [
        format!("--nnodes={nodes}"),
        format!("--node-rank={node_rank}"),
        "--rdzv-backend=c10d".into(),
        format!("--rdzv-endpoint={endpoint}"),
        format!("--rdzv-id={id}"),
    ];
    let kept = argv[at..].iter().filter(|a| a.as_str() != "--standalone").cloned();
    argv[..at].iter().cloned().chain(added).chain(kept).collect()
}

/// A free TCP port on this host, for the rendezvous store.
pub fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// The rendezvous endpoint of a trial: the first node's host and a free port.
pub fn endpoint(nodes: &Nodes) -> std::io::Result<String> {
    let host = match &nodes.launcher {
        Launcher::Local => "127.0.0.1".to_string(),
        Launcher::Ssh { hosts } => hosts.first().cloned().unwrap_or_else(|| "127.0.0.1".into()),
        // vramprobe runs in the allocation: the agents reach it by its host
        // name (a host whose name does not resolve is a one-host cluster).
        Launcher::Slurm => Some(crate::measure::environment::hostname())
            .filter(|h| (h.as_str(), 0).to_socket_addrs().is_ok_and(|mut a| a.next().is_some()))
            .unwrap_or_else(|| "127.0.0.1".into()),
    };
    Ok(format!("{host}:{}", free_port()?))
}

/// The trial's child: `vramprobe launch`, or for Slurm `srun` running it
/// once per node as the agent of that node.
pub fn trial_command(exe: &std::path::Path, nodes: &Nodes, argv: &[String], endpoint: &str, id: &str) -> Command {
    let mut launch: Vec<String> = vec![
        "launch".into(),
        "--nodes".into(),
        nodes.count.to_string(),
        "--endpoint".into(),
        endpoint.into(),
        "--id".into(),
        id.into(),
    ];
    let mut command = match &nodes.launcher {
        Launcher::Slurm => {
            let mut c = Command::new("srun");
            c.args(["--nodes", &nodes.count.to_string(), "--ntasks", &nodes.count.to_string()]);
            c.args(["--ntasks-per-node=1", "--kill-on-bad-exit=1", "--wait=10"]).arg(exe);
            launch.push("--agent".into());
            c
        }
        Launcher::Local => Command::new(exe),
        Launcher::Ssh { hosts } => {
            launch.extend(["--hosts".into(), hosts.join(",")]);
            Command::new(exe)
        }
    };
    command.args(launch).arg("--").args(argv);
    command
}

/// Inside `srun`: this task's node is `SLURM_NODEID`; becomes its agent.
pub fn exec_agent(argv: &[String], nodes: u32, endpoint: &str, id: &str) -> std::io::Error {
    let node: u32 = std::env::var("SLURM_NODEID").ok().and_then(|n| n.parse().ok()).unwrap_or(0);
    let agent = agent_argv(argv, nodes, node, endpoint, id);
    Command::new(&agent[0]).args(&agent[1..]).exec()
}

/// The environment an agent started over ssh needs: what vramprobe set
/// for the trial (ssh passes no environment on).
fn forwarded_env() -> Vec<String> {
    const KEYS: [&str; 3] = ["PYTHONPATH", "KINETO_LOG_LEVEL", "PYTORCH_CUDA_ALLOC_CONF"];
    std::env::vars()
        .filter(|(k, _)| k.starts_with("VRAMPROBE_") || KEYS.contains(&k.as_str()))
        .map(|(k, v)| format!("{k}={}", crate::units::shell_line(&[v])))
        .collect()
}

/// The shell line an agent runs over ssh: in this folder, with the trial's environment.
fn remote_line(agent: &[String]) -> String {
    let cwd = std::env::current_dir().map(|d| d.to_string_lossy().into_owned()).unwrap_or_else(|_| ".".into());
    let env = forwarded_env().join(" ");
    format!("cd {} && env {env} {}", crate::units::shell_line(&[cwd]), crate::units::shell_line(agent))
}

/// Starts every agent (on this host, or over ssh on `hosts`) and waits;
/// the first that fails stops the others. The job's exit code.
pub fn run_agents(argv: &[String], nodes: u32, endpoint: &str, id: &str, hosts: Option<&[String]>) -> i32 {
    let mut agents: Vec<Child> = Vec::new();
    for node in 0..nodes {
        let agent = agent_argv(argv, nodes, node, endpoint, id);
        let mut command = match hosts.and_then(|h| h.get(node as usize)) {
            Some(host) => {
                let mut c = Command::new("ssh");
                c.args(["-o", "BatchMode=yes", host, &remote_line(&agent)]);
                c
            }
            None => {
                let mut c = Command::new(&agent[0]);
                c.args(&agent[1..]);
                c
            }
        };
        match command.spawn() {
            Ok(child) => agents.push(child),
            Err(e) => {
                eprintln!("vramprobe launch: could not start node {node}'s agent ({}): {e}", agent[0]);
                stop(&mut agents);
                return 127;
            }
        }
    }
    supervise(agents)
}

/// Waits for every agent; when one ends in failure, the rest are stopped.
fn supervise(mut agents: Vec<Child>) -> i32 {
    let mut codes: Vec<Option<i32>> = vec![None; agents.len()];
    loop {
        for (agent, code) in agents.iter_mut().zip(codes.iter_mut()) {
            if code.is_none() {
                *code = agent.try_wait().ok().flatten().map(exit_code);
            }
        }
        if let Some(failed) = codes.iter().flatten().find(|&&c| c != 0) {
            let failed = *failed;
            stop(&mut agents);
            return failed;
        }
        if codes.iter().all(Option::is_some) {
            return 0;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn exit_code(status: ExitStatus) -> i32 {
    status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

/// SIGTERM to every agent still running (torchrun passes it to its
/// workers), SIGKILL after 5 s.
fn stop(agents: &mut [Child]) {
    for agent in agents.iter() {
        // SAFETY: signalling a child we started and have not reaped.
        unsafe { libc::kill(agent.id() as i32, libc::SIGTERM) };
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    for agent in agents.iter_mut() {
        while agent.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = agent.kill();
        let _ = agent.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(line: &str) -> Vec<String> {
        line.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn each_agent_gets_the_rendezvous_and_its_node() {
        let job = argv("/venv/bin/torchrun --standalone --nproc-per-node 2 train.py --batch-size 8");
        assert_eq!(
            agent_argv(&job, 2, 1, "10.0.0.1:29400", "t7").join(" "),
            "/venv/bin/torchrun --nnodes=2 --node-rank=1 --rdzv-backend=c10d --rdzv-endpoint=10.0.0.1:29400 \
             --rdzv-id=t7 --nproc-per-node 2 train.py --batch-size 8"
        );
        let module = argv("python -m torch.distributed.run --nproc-per-node 1 t.py {batch}");
        assert_eq!(torchrun_options_at(&module), Some(3));
        assert!(agent_argv(&module, 2, 0, "h:1", "x")[3].starts_with("--nnodes=2"));
    }

    #[test]
    fn only_a_torchrun_without_its_own_rendezvous_spans_nodes() {
        assert!(refuse(&argv("python train.py {batch}")).unwrap().contains("needs a torchrun command"));
        assert!(refuse(&argv("torchrun --nnodes 2 t.py {batch}")).unwrap().contains("leave --nnodes out"));
        assert!(refuse(&argv("torchrun --rdzv-endpoint=h:1 t.py {batch}")).unwrap().contains("--rdzv-endpoint"));
        assert_eq!(refuse(&argv("torchrun --nproc-per-node 2 t.py {batch}")), None);
    }

    #[test]
    fn a_failing_agent_stops_the_others() {
        let started = Instant::now();
        let sleeper = Command::new("sleep").arg("30").spawn().unwrap();
        let failing = Command::new("sh").args(["-c", "sleep 0.2; exit 3"]).spawn().unwrap();
        assert_eq!(supervise(vec![sleeper, failing]), 3);
        assert!(started.elapsed() < Duration::from_secs(10));
        let ok = Command::new("true").spawn().unwrap();
        assert_eq!(supervise(vec![ok]), 0);
    }
}
