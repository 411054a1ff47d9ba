fn main() {
    vramprobe::shim::host_tracking_start().unwrap();
    let before = vramprobe::shim::host_stats();
    let t = tch::Tensor::zeros([1024, 1024], (tch::Kind::Float, tch::Device::Cpu));
    let during = vramprobe::shim::host_stats();
    drop(t);
    let after = vramprobe::shim::host_stats();
    println!("{before:?} {during:?} {after:?} torch {} cuda {:?} {:?}", vramprobe::shim::torch_version(), vramprobe::shim::cuda_runtime_version(), vramprobe::shim::cuda_stats(0));
}
