//! The models: built-in ones by torchvision (or nanoGPT) name, each with its
//! default input and class count, and the user's own TorchScript files.
//! Parameter counts equal torchvision's (or GPT-2's) for the same name. Each
//! built-in model runs the same ops as its original, in-place activations
//! included, so its memory per step is PyTorch's (./scripts/parity).
//!
//! This is the registry (names, inputs, classes: no libtorch); the networks
//! themselves, which link libtorch, are the built-in child's
//! (measure/child/networks/).
use crate::error::UsageError;
use std::path::Path;

/// The one line that says how to get the built-in models in a build without them.
pub const NO_BUILTIN: &str = "this vramprobe was built without the built-in models (no libtorch): measure your own \
     command with `vramprobe sweep -- python train.py --batch-size {batch}`, or build them in with `cargo install --locked \
     --path . --features builtin` (LIBTORCH set) or ./scripts/vramprobe from a clone";

/// What a model reads: images (channels x height x width, float) or token
/// ids (a sequence length; the classes are the vocabulary).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputKind {
    Image,
    Tokens,
}

/// A registry entry.
pub struct ModelSpec {
    pub name: &'static str,
    /// Channels x height x width the model was designed for, or its context length.
    pub default_input: &'static [i64],
    pub default_classes: i64,
    pub family: &'static str,
    pub input_kind: InputKind,
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
    },
    ModelSpec {
        name: "resnet34",
        default_input: IMAGENET,
        default_classes: 1000,
        input_kind: InputKind::Image,
        family: "ResNet",
    },
    ModelSpec {
        name: "resnet50",
        default_input: IMAGENET,
        default_classes: 1000,
        input_kind: InputKind::Image,
        family: "ResNet",
    },
    ModelSpec {
        name: "resnet101",
        default_input: IMAGENET,
        default_classes: 1000,
        input_kind: InputKind::Image,
        family: "ResNet",
    },
    ModelSpec {
        name: "resnet152",
        default_input: IMAGENET,
        default_classes: 1000,
        input_kind: InputKind::Image,
        family: "ResNet",
    },
    ModelSpec {
        name: "vgg11",
        default_input: IMAGENET,
        default_classes: 1000,
        input_kind: InputKind::Image,
        family: "VGG",
    },
    ModelSpec {
        name: "vgg16",
        default_input: IMAGENET,
        default_classes: 1000,
        input_kind: InputKind::Image,
        family: "VGG",
    },
    ModelSpec {
        name: "vgg16_bn",
        default_input: IMAGENET,
        default_classes: 1000,
        input_kind: InputKind::Image,
        family: "VGG",
    },
    ModelSpec {
        name: "densenet121",
        default_input: IMAGENET,
        default_classes: 1000,
        input_kind: InputKind::Image,
        family: "DenseNet",
    },
    ModelSpec {
        name: "mobilenet_v2",
        default_input: IMAGENET,
        default_classes: 1000,
        input_kind: InputKind::Image,
        family: "MobileNet",
    },
    ModelSpec {
        name: "efficientnet_b0",
        default_input: IMAGENET,
        default_classes: 1000,
        input_kind: InputKind::Image,
        family: "EfficientNet",
    },
    ModelSpec {
        name: "squeezenet1_1",
        default_input: IMAGENET,
        default_classes: 1000,
        input_kind: InputKind::Image,
        family: "SqueezeNet",
    },
    ModelSpec {
        name: "alexnet",
        default_input: IMAGENET,
        default_classes: 1000,
        input_kind: InputKind::Image,
        family: "AlexNet",
    },
    ModelSpec {
        name: "inception_v3",
        default_input: &[3, 299, 299],
        default_classes: 1000,
        input_kind: InputKind::Image,
        family: "Inception",
    },
    ModelSpec {
        name: "gpt2-small",
        default_input: GPT2_CONTEXT,
        default_classes: GPT2_VOCAB,
        input_kind: InputKind::Tokens,
        family: "GPT",
    },
    ModelSpec {
        name: "gpt2-medium",
        default_input: GPT2_CONTEXT,
        default_classes: GPT2_VOCAB,
        input_kind: InputKind::Tokens,
        family: "GPT",
    },
    ModelSpec {
        name: "gpt2-large",
        default_input: GPT2_CONTEXT,
        default_classes: GPT2_VOCAB,
        input_kind: InputKind::Tokens,
        family: "GPT",
    },
    ModelSpec {
        name: "gpt2-xl",
        default_input: GPT2_CONTEXT,
        default_classes: GPT2_VOCAB,
        input_kind: InputKind::Tokens,
        family: "GPT",
    },
    ModelSpec {
        name: "gpt-mini",
        default_input: GPT2_CONTEXT,
        default_classes: GPT2_VOCAB,
        input_kind: InputKind::Tokens,
        family: "GPT",
    },
    ModelSpec {
        name: "gpt-micro",
        default_input: GPT2_CONTEXT,
        default_classes: GPT2_VOCAB,
        input_kind: InputKind::Tokens,
        family: "GPT",
    },
    ModelSpec {
        name: "gpt-nano",
        default_input: GPT2_CONTEXT,
        default_classes: GPT2_VOCAB,
        input_kind: InputKind::Tokens,
        family: "GPT",
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
