//! The built-in networks and the TorchScript loader: everything of the
//! models that links libtorch (the `builtin` feature). The registry they
//! are named in is the parent module's.
mod alexnet;
mod densenet;
mod efficientnet;
mod gpt;
mod inception;
mod layers;
mod resnet;
mod torchscript;
mod vgg;

use gpt::GptShape;
use tch::{nn, nn::ModuleT, vision, TchError, Tensor};

use crate::measure::model::{ModelSpec, Source};

/// What a forward pass returns in training: the logits, plus auxiliary logits
/// where the architecture trains with them (inception_v3).
pub struct Outputs {
    pub logits: Tensor,
    pub aux: Option<Tensor>,
}

/// A trainable network.
pub trait Network: std::fmt::Debug + Send {
    fn forward(&self, xs: &Tensor, train: bool) -> Result<Outputs, TchError>;
}

/// A tch `ModuleT` with a single output.
#[derive(Debug)]
struct Plain<M>(M);

impl<M: ModuleT> Network for Plain<M> {
    fn forward(&self, xs: &Tensor, train: bool) -> Result<Outputs, TchError> {
        Ok(Outputs { logits: self.0.forward_t(xs, train), aux: None })
    }
}

fn plain<M: ModuleT + 'static>(m: M) -> Box<dyn Network> {
    Box::new(Plain(m))
}

/// The network of a registry entry, by its name, under `p` with `c` classes.
fn build(name: &str, p: &nn::Path, c: i64) -> Result<Box<dyn Network>, TchError> {
    let net: Box<dyn Network> = match name {
        "resnet18" => Box::new(resnet::resnet18(p, c)),
        "resnet34" => Box::new(resnet::resnet34(p, c)),
        "resnet50" => Box::new(resnet::resnet50(p, c)),
        "resnet101" => Box::new(resnet::resnet101(p, c)),
        "resnet152" => Box::new(resnet::resnet152(p, c)),
        "vgg11" => plain(vgg::vgg11(p, c)),
        "vgg16" => plain(vgg::vgg16(p, c)),
        "vgg16_bn" => plain(vgg::vgg16_bn(p, c)),
        "densenet121" => plain(densenet::densenet121(p, c)),
        "mobilenet_v2" => plain(vision::mobilenet::v2(p, c)),
        "efficientnet_b0" => plain(efficientnet::b0(p, c)),
        "squeezenet1_1" => plain(vision::squeezenet::v1_1(p, c)),
        "alexnet" => plain(alexnet::alexnet(p, c)),
        "inception_v3" => Box::new(inception::v3(p, c)),
        "gpt2-small" => Box::new(gpt::gpt(p, GptShape { layers: 12, heads: 12, width: 768, context: 1024 }, c)),
        "gpt2-medium" => Box::new(gpt::gpt(p, GptShape { layers: 24, heads: 16, width: 1024, context: 1024 }, c)),
        "gpt2-large" => Box::new(gpt::gpt(p, GptShape { layers: 36, heads: 20, width: 1280, context: 1024 }, c)),
        "gpt2-xl" => Box::new(gpt::gpt(p, GptShape { layers: 48, heads: 25, width: 1600, context: 1024 }, c)),
        "gpt-mini" => Box::new(gpt::gpt(p, GptShape { layers: 6, heads: 6, width: 192, context: 1024 }, c)),
        "gpt-micro" => Box::new(gpt::gpt(p, GptShape { layers: 4, heads: 4, width: 128, context: 1024 }, c)),
        "gpt-nano" => Box::new(gpt::gpt(p, GptShape { layers: 3, heads: 3, width: 48, context: 1024 }, c)),
        other => return Err(TchError::Torch(format!("the registry names {other}, which has no network"))),
    };
    Ok(net)
}

impl ModelSpec {
    /// Builds the network's variables under `path` (on the path's device).
    pub fn build(&self, path: &nn::Path, classes: i64) -> Result<Box<dyn Network>, TchError> {
        build(self.name, path, classes)
    }

    /// Trainable parameter count at `classes` outputs, built on the CPU
    /// (weights are initialised once; nothing runs through the network).
    pub fn parameter_count(&self, classes: i64) -> Result<i64, TchError> {
        let vs = nn::VarStore::new(tch::Device::Cpu);
        let _net = self.build(&vs.root(), classes)?;
        Ok(parameter_count(&vs))
    }
}

impl Source<'_> {
    /// Builds the network's variables under `path` (on the path's device).
    /// `bf16`: a loaded module converts itself whole (the caller converts
    /// the variable store of a built-in one).
    pub fn build(&self, path: &nn::Path, classes: i64, bf16: bool) -> Result<Box<dyn Network>, TchError> {
        match self {
            Source::BuiltIn(spec) => spec.build(path, classes),
            Source::TorchScript(file) => Ok(Box::new(torchscript::load(file, path, bf16)?)),
        }
    }
}

/// Trainable parameters held by a variable store (buffers such as batch norm
/// running statistics are not parameters).
pub fn parameter_count(vs: &nn::VarStore) -> i64 {
    vs.trainable_variables().iter().map(Tensor::numel).map(|n| n as i64).sum()
}
