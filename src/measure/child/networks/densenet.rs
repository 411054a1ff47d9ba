//! DenseNet-121 as torchvision builds it, op for op: each dense layer
//! concatenates every earlier feature map (`torch.cat`) before its batch
//! norm, ReLU in place after each batch norm, a final in-place ReLU and
//! adaptive average pooling (so any input of at least 29x29 works, as in
//! torchvision; tch's zoo pools to a fixed 7x7 and only runs at 224).
//! Variable names follow torchvision's state_dict keys
//! (`features.denseblock1.denselayer1.norm1.weight`).
use tch::{nn, nn::ModuleT, Tensor};

use super::layers::relu_inplace;

fn conv(p: nn::Path, c_in: i64, c_out: i64, k: i64, stride: i64, padding: i64) -> nn::Conv2D {
    nn::conv2d(p, c_in, c_out, k, nn::ConvConfig { stride, padding, bias: false, ..Default::default() })
}

fn bn(p: nn::Path, c: i64) -> nn::BatchNorm {
    nn::batch_norm2d(p, c, Default::default())
}

/// torchvision's `_DenseLayer` (drop_rate 0, not memory efficient): the
/// growth-rate new channels from the concatenation of `features`.
struct DenseLayer {
    norm1: nn::BatchNorm,
    conv1: nn::Conv2D,
    norm2: nn::BatchNorm,
    conv2: nn::Conv2D,
}

impl DenseLayer {
    fn new(p: nn::Path, c_in: i64, growth: i64, bn_size: i64) -> DenseLayer {
        DenseLayer {
            norm1: bn(&p / "norm1", c_in),
            conv1: conv(&p / "conv1", c_in, bn_size * growth, 1, 1, 0),
            norm2: bn(&p / "norm2", bn_size * growth),
            conv2: conv(&p / "conv2", bn_size * growth, growth, 3, 1, 1),
        }
    }

    fn forward(&self, features: &[Tensor], train: bool) -> Tensor {
        // torchvision concatenates even a single input (a copy), as here.
        let concatenated = Tensor::cat(features, 1);
        let bottleneck = relu_inplace(&concatenated.apply_t(&self.norm1, train)).apply(&self.conv1);
        relu_inplace(&bottleneck.apply_t(&self.norm2, train)).apply(&self.conv2)
    }
}

/// torchvision's `_DenseBlock`: the input and every layer's output,
/// concatenated.
fn dense_block(p: nn::Path, layers: i64, c_in: i64, growth: i64, bn_size: i64) -> impl ModuleT {
    let layers: Vec<DenseLayer> = (0..layers)
        .map(|i| DenseLayer::new(&p / format!("denselayer{}", i + 1), c_in + i * growth, growth, bn_size))
        .collect();
    nn::func_t(move |xs, train| {
        let mut features = vec![xs.shallow_clone()];
        for layer in &layers {
            let new = layer.forward(&features, train);
            features.push(new);
        }
        Tensor::cat(&features, 1)
    })
}

/// torchvision's `_Transition`: batch norm, ReLU in place, 1x1 convolution,
/// 2x2 average pool.
fn transition(p: nn::Path, c_in: i64, c_out: i64) -> nn::SequentialT {
    nn::seq_t()
        .add(bn(&p / "norm", c_in))
        .add_fn(relu_inplace)
        .add(conv(&p / "conv", c_in, c_out, 1, 1, 0))
        .add_fn(|xs| xs.avg_pool2d([2, 2], [2, 2], [0, 0], false, true, None::<i64>))
}

fn densenet(p: &nn::Path, c_init: i64, growth: i64, blocks: [i64; 4], classes: i64) -> nn::SequentialT {
    const BN_SIZE: i64 = 4;
    let f = p / "features";
    let mut seq = nn::seq_t()
        .add(conv(&f / "conv0", 3, c_init, 7, 2, 3))
        .add(bn(&f / "norm0", c_init))
        .add_fn(relu_inplace)
        .add_fn(|xs| xs.max_pool2d([3, 3], [2, 2], [1, 1], [1, 1], false));
    let mut c = c_init;
    for (i, &layers) in blocks.iter().enumerate() {
        seq = seq.add(dense_block(&f / format!("denseblock{}", i + 1), layers, c, growth, BN_SIZE));
        c += layers * growth;
        if i + 1 != blocks.len() {
            seq = seq.add(transition(&f / format!("transition{}", i + 1), c, c / 2));
            c /= 2;
        }
    }
    seq.add(bn(&f / "norm5", c))
        .add_fn(|xs| relu_inplace(xs).adaptive_avg_pool2d([1, 1]).flatten(1, -1))
        .add(nn::linear(p / "classifier", c, classes, Default::default()))
}

pub fn densenet121(p: &nn::Path, classes: i64) -> nn::SequentialT {
    densenet(p, 64, 32, [6, 12, 24, 16], classes)
}
