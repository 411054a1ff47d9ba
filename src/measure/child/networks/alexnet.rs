//! AlexNet as torchvision builds it, op for op: ReLU in place, adaptive
//! average pooling to 6x6 (any input of at least 63x63 works, as in
//! torchvision), and dropout before each of the first two linear layers (tch's
//! zoo orders the classifier the same but applies ReLU out of place, which
//! allocates a new tensor per ReLU). Variable names follow torchvision's
//! state_dict keys (`features.0.weight`).
use tch::nn;

use super::layers::{max_pool, relu_inplace};

fn conv(p: nn::Path, c_in: i64, c_out: i64, k: i64, stride: i64, padding: i64) -> nn::Conv2D {
    nn::conv2d(p, c_in, c_out, k, nn::ConvConfig { stride, padding, ..Default::default() })
}

pub fn alexnet(p: &nn::Path, classes: i64) -> nn::SequentialT {
    let f = p / "features";
    let c = p / "classifier";
    nn::seq_t()
        .add(conv(&f / 0, 3, 64, 11, 4, 2))
        .add_fn(relu_inplace)
        .add_fn(|xs| max_pool(xs, 3, 2))
        .add(conv(&f / 3, 64, 192, 5, 1, 2))
        .add_fn(relu_inplace)
        .add_fn(|xs| max_pool(xs, 3, 2))
        .add(conv(&f / 6, 192, 384, 3, 1, 1))
        .add_fn(relu_inplace)
        .add(conv(&f / 8, 384, 256, 3, 1, 1))
        .add_fn(relu_inplace)
        .add(conv(&f / 10, 256, 256, 3, 1, 1))
        .add_fn(relu_inplace)
        .add_fn(|xs| max_pool(xs, 3, 2))
        .add_fn(|xs| xs.adaptive_avg_pool2d([6, 6]).flatten(1, -1))
        .add_fn_t(|xs, train| xs.dropout(0.5, train))
        .add(nn::linear(&c / 1, 256 * 6 * 6, 4096, Default::default()))
        .add_fn(relu_inplace)
        .add_fn_t(|xs, train| xs.dropout(0.5, train))
        .add(nn::linear(&c / 4, 4096, 4096, Default::default()))
        .add_fn(relu_inplace)
        .add(nn::linear(&c / 6, 4096, classes, Default::default()))
}
