//! The models: built-in ones by torchvision (or nanoGPT) name, each with its
//! default input and class count, and the user's own TorchScript files.
//! Parameter counts equal torchvision's (or GPT-2's) for the same name. Each
//! built-in model runs the same ops as its original, in-place activations
//! included, so its memory per step is PyTorch's (./scripts/parity).
#[cfg(feature = "builtin")]
mod alexnet;
#[cfg(feature = "builtin")]
mod densenet;
#[cfg(feature = "builtin")]
mod efficientnet;
#[cfg(feature = "builtin")]
mod gpt;
#[cfg(feature = "builtin")]
mod inception;
#[cfg(feature = "builtin")]
mod layers;
#[cfg(feature = "builtin")]
mod resnet;
#[cfg(feature = "builtin")]
mod torchscript;
#[cfg(feature = "builtin")]
mod vgg;

use std::path::Path;

#[cfg(feature = "builtin")]
use gpt::GptShape;
#[cfg(feature = "builtin")]
use tch::{nn, nn::ModuleT, vision, TchError, Tensor};

use crate::error::UsageError;

/// What a forward pass returns in training: the logits, plus auxiliary logits
/// where the architecture trains with them (inception_v3).
#[cfg(feature = "builtin")]
pub struct Outputs {
    pub logits: Tensor,
    pub aux: Option<Tensor>,
}

/// A trainable network.
#[cfg(feature = "builtin")]
pub trait Network: std::fmt::Debug + Send {
    fn forward(&self, xs: &Tensor, train: bool) -> Result<Outputs, TchError>;
}

/// A tch `ModuleT` with a single output.
#[cfg(feature = "builtin")]
#[derive(Debug)]
struct Plain<M>(M);

#[cfg(feature = "builtin")]
impl<M: ModuleT> Network for Plain<M> {
    fn forward(&self, xs: &Tensor, train: bool) -> Result<Outputs, TchError> {
        Ok(Outputs { logits: self.0.forward_t(xs, train), aux: None })
    }
}

#[cfg(feature = "builtin")]
fn plain<M: ModuleT + 'static>(m: M) -> Box<dyn Network> {
    Box::new(Plain(m))
}

/// What a model reads: images (channels x height x width, float) or token
/// ids (a sequence length; the classes are the vocabulary).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputKind {
    Image,
    Tokens,
}

#[cfg(feature = "builtin")]
type Builder = fn(&nn::Path, i64) -> Box<dyn Network>;

/// A registry entry.
pub struct ModelSpec {
    pub name: &'static str,
    /// Channels x height x width the model was designed for, or its context length.
    pub default_input: &'static [i64],
    pub default_classes: i64,
    pub family: &'static str,
    pub input_kind: InputKind,
    #[cfg(feature = "builtin")]
    build: Builder,
}

const IMAGENET: &[i64] = &[3, 224, 224];
/// GPT-2's vocabulary (its token classes).
pub const GPT2_VOCAB: i64 = 50257;
/// GPT-2's context: the longest sequence, the default length.
const GPT2_CONTEXT: &[i64] = &[1024];

const MODELS: &[ModelSpec] = &[
    ModelSpec {
        name: "resnet18",
        default_input: IMAGENET,
        default_classes: 1000,
        input_kind: InputKind::Image,
        family: "ResNet",
        #[cfg(feature = "builtin")]
        build: |p, c| Box::new(resnet::resnet18(p, c)),
    },
    ModelSpec {
        name: "resnet34",
        default_input: IMAGENET,
        default_classes: 1000,
        input_kind: InputKind::Image,
        family: "ResNet",
        #[cfg(feature = "builtin")]
        build: |p, c| Box::new(resnet::resnet34(p, c)),
    },
    ModelSpec {
        name: "resnet50",
        default_input: IMAGENET,
        default_classes: 1000,
        input_kind: InputKind::Image,
        family: "ResNet",
        #[cfg(feature = "builtin")]
        build: |p, c| Box::new(resnet::resnet50(p, c)),
    },
    ModelSpec {
        name: "resnet101",
        default_input: IMAGENET,
        default_classes: 1000,
        input_kind: InputKind::Image,
        family: "ResNet",
        #[cfg(feature = "builtin")]
        build: |p, c| Box::new(resnet::resnet101(p, c)),
    },
    ModelSpec {
        name: "resnet152",
        default_input: IMAGENET,
        default_classes: 1000,
        input_kind: InputKind::Image,
        family: "ResNet",
        #[cfg(feature = "builtin")]
        build: |p, c| Box::new(resnet::resnet152(p, c)),
    },
    ModelSpec {
        name: "vgg11",
        default_input: IMAGENET,
        default_classes: 1000,
        input_kind: InputKind::Image,
        family: "VGG",
        #[cfg(feature = "builtin")]
        build: |p, c| plain(vgg::vgg11(p, c)),
    },
    ModelSpec {
        name: "vgg16",
        default_input: IMAGENET,
        default_classes: 1000,
        input_kind: InputKind::Image,
        family: "VGG",
        #[cfg(feature = "builtin")]
        build: |p, c| plain(vgg::vgg16(p, c)),
    },
    ModelSpec {
        name: "vgg16_bn",
        default_input: IMAGENET,
        default_classes: 1000,
        input_kind: InputKind::Image,
        family: "VGG",
        #[cfg(feature = "builtin")]
        build: |p, c| plain(vgg::vgg16_bn(p, c)),
    },
    ModelSpec {
        name: "densenet121",
        default_input: IMAGENET,
        default_classes: 1000,
        input_kind: InputKind::Image,
        family: "DenseNet",
        #[cfg(feature = "builtin")]
        build: |p, c| plain(densenet::densenet121(p, c)),
    },
    ModelSpec {
        name: "mobilenet_v2",
        default_input: IMAGENET,
        default_classes: 1000,
        input_kind: InputKind::Image,
        family: "MobileNet",
        #[cfg(feature = "builtin")]
        build: |p, c| plain(vision::mobilenet::v2(p, c)),
    },
    ModelSpec {
        name: "efficientnet_b0",
        default_input: IMAGENET,
        default_classes: 1000,
        input_kind: InputKind::Image,
        family: "EfficientNet",
        #[cfg(feature = "builtin")]
        build: |p, c| plain(efficientnet::b0(p, c)),
    },
    ModelSpec {
        name: "squeezenet1_1",
        default_input: IMAGENET,
        default_classes: 1000,
        input_kind: InputKind::Image,
        family: "SqueezeNet",
        #[cfg(feature = "builtin")]
        build: |p, c| plain(vision::squeezenet::v1_1(p, c)),
    },
    ModelSpec {
        name: "alexnet",
        default_input: IMAGENET,
        default_classes: 1000,
        input_kind: InputKind::Image,
        family: "AlexNet",
        #[cfg(feature = "builtin")]
        build: |p, c| plain(alexnet::alexnet(p, c)),
    },
    ModelSpec {
        name: "inception_v3",
        default_input: &[3, 299, 299],
        default_classes: 1000,
        input_kind: InputKind::Image,
        family: "Inception",
        #[cfg(feature = "builtin")]
        build: |p, c| Box::new(inception::v3(p, c)),
    },
    ModelSpec {
        name: "gpt2-small",
        default_input: GPT2_CONTEXT,
        default_classes: GPT2_VOCAB,
        input_kind: InputKind::Tokens,
        family: "GPT",
        #[cfg(feature = "builtin")]
        build: |p, c| Box::new(gpt::gpt(p, GptShape { layers: 12, heads: 12, width: 768, context: 1024 }, c)),
    },
    ModelSpec {
        name: "gpt2-medium",
        default_input: GPT2_CONTEXT,
        default_classes: GPT2_VOCAB,
        input_kind: InputKind::Tokens,
        family: "GPT",
        #[cfg(feature = "builtin")]
        build: |p, c| Box::new(gpt::gpt(p, GptShape { layers: 24, heads: 16, width: 1024, context: 1024 }, c)),
    },
    ModelSpec {
        name: "gpt2-large",
        default_input: GPT2_CONTEXT,
        default_classes: GPT2_VOCAB,
        input_kind: InputKind::Tokens,
        family: "GPT",
        #[cfg(feature = "builtin")]
        build: |p, c| Box::new(gpt::gpt(p, GptShape { layers: 36, heads: 20, width: 1280, context: 1024 }, c)),
    },
    ModelSpec {
        name: "gpt2-xl",
        default_input: GPT2_CONTEXT,
        default_classes: GPT2_VOCAB,
        input_kind: InputKind::Tokens,
        family: "GPT",
        #[cfg(feature = "builtin")]
        build: |p, c| Box::new(gpt::gpt(p, GptShape { layers: 48, heads: 25, width: 1600, context: 1024 }, c)),
    },
    ModelSpec {
        name: "gpt-mini",
        default_input: GPT2_CONTEXT,
        default_classes: GPT2_VOCAB,
        input_kind: InputKind::Tokens,
        family: "GPT",
        #[cfg(feature = "builtin")]
        build: |p, c| Box::new(gpt::gpt(p, GptShape { layers: 6, heads: 6, width: 192, context: 1024 }, c)),
    },
    ModelSpec {
        name: "gpt-micro",
        default_input: GPT2_CONTEXT,
        default_classes: GPT2_VOCAB,
        input_kind: InputKind::Tokens,
        family: "GPT",
        #[cfg(feature = "builtin")]
        build: |p, c| Box::new(gpt::gpt(p, GptShape { layers: 4, heads: 4, width: 128, context: 1024 }, c)),
    },
    ModelSpec {
        name: "gpt-nano",
        default_input: GPT2_CONTEXT,
        default_classes: GPT2_VOCAB,
        input_kind: InputKind::Tokens,
        family: "GPT",
        #[cfg(feature = "builtin")]
        build: |p, c| Box::new(gpt::gpt(p, GptShape { layers: 3, heads: 3, width: 48, context: 1024 }, c)),
    },
];

/// A model named on the command line.
#[derive(Clone, Copy)]
pub enum Source<'a> {
    BuiltIn(&'static ModelSpec),
    /// A TorchScript file (the name is a path).
    TorchScript(&'a Path),
}

/// Resolves `--model`: a built-in name, or a path to an existing TorchScript file.
pub fn source(name: &str) -> Result<Source<'_>, UsageError> {
    if !crate::record::subject::is_path(name) {
        return find(name).map(Source::BuiltIn);
    }
    let path = Path::new(name);
    if !path.is_file() {
        return Err(UsageError::new(format!(
            "--model {name}: no such file (a TorchScript model file, or a built-in model name)"
        )));
    }
    Ok(Source::TorchScript(path))
}

impl Source<'_> {
    pub fn input_kind(&self) -> InputKind {
        match self {
            Source::BuiltIn(spec) => spec.input_kind,
            Source::TorchScript(_) => InputKind::Image,
        }
    }

    /// Builds the network's variables under `path` (on the path's device).
    /// `bf16`: a loaded module converts itself whole (the caller converts
    /// the variable store of a built-in one).
    #[cfg(feature = "builtin")]
    pub fn build(&self, path: &nn::Path, classes: i64, bf16: bool) -> Result<Box<dyn Network>, TchError> {
        match self {
            Source::BuiltIn(spec) => Ok(spec.build(path, classes)),
            Source::TorchScript(file) => Ok(Box::new(torchscript::load(file, path, bf16)?)),
        }
    }
}

/// Every built-in model, in listing order.
pub fn all() -> &'static [ModelSpec] {
    MODELS
}

/// Looks a model up by name; the error lists the known ones.
pub fn find(name: &str) -> Result<&'static ModelSpec, UsageError> {
    MODELS.iter().find(|m| m.name == name).ok_or_else(|| {
        let known: Vec<&str> = MODELS.iter().map(|m| m.name).collect();
        UsageError::new(format!("unknown model '{name}'; known models: {}", known.join(", ")))
    })
}

#[cfg(feature = "builtin")]
impl ModelSpec {
    /// Builds the network's variables under `path` (on the path's device).
    pub fn build(&self, path: &nn::Path, classes: i64) -> Box<dyn Network> {
        (self.build)(path, classes)
    }

    /// Trainable parameter count at `classes` outputs, built on the CPU
    /// (weights are initialised once; nothing runs through the network).
    pub fn parameter_count(&self, classes: i64) -> i64 {
        let vs = nn::VarStore::new(tch::Device::Cpu);
        let _net = self.build(&vs.root(), classes);
        parameter_count(&vs)
    }
}

/// Trainable parameters held by a variable store (buffers such as batch norm
/// running statistics are not parameters).
#[cfg(feature = "builtin")]
pub fn parameter_count(vs: &nn::VarStore) -> i64 {
    vs.trainable_variables().iter().map(Tensor::numel).map(|n| n as i64).sum()
}
