//! Small pieces the torchvision rebuilds share.
use tch::Tensor;

/// `nn.ReLU(inplace=True)`: the activation overwrites its input rather than
/// allocating a second activation-sized tensor next to it (tch's zoo), a
/// transient that the per-step peak can land on.
pub fn relu_inplace(xs: &Tensor) -> Tensor {
    let mut xs = xs.shallow_clone();
    let _ = xs.relu_();
    xs
}

/// `nn.SiLU(inplace=True)`, for the same reason.
pub fn silu_inplace(xs: &Tensor) -> Tensor {
    let mut xs = xs.shallow_clone();
    let _ = xs.silu_();
    xs
}

/// `nn.MaxPool2d(kernel_size, stride)` with no padding.
pub fn max_pool(xs: &Tensor, kernel: i64, stride: i64) -> Tensor {
    xs.max_pool2d([kernel, kernel], [stride, stride], [0, 0], [1, 1], false)
}
