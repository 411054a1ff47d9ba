//! Every built-in model has torchvision's parameter count for the same name
//! (values computed once with torchvision 0.28: sum(p.numel() for p in
//! model.parameters()), default constructor arguments), and the GPTs have
//! GPT-2's (computed with scripts/torch_gpt.py, nanoGPT's model, on the meta
//! device; the output layer shares the token embedding).
#![cfg(feature = "builtin")]
use vramprobe::measure::model;

const TORCHVISION_PARAMETERS: [(&str, i64); 14] = [
    ("resnet18", 11_689_512),
    ("resnet34", 21_797_672),
    ("resnet50", 25_557_032),
    ("resnet101", 44_549_160),
    ("resnet152", 60_192_808),
    ("vgg11", 132_863_336),
    ("vgg16", 138_357_544),
    ("vgg16_bn", 138_365_992),
    ("densenet121", 7_978_856),
    ("mobilenet_v2", 3_504_872),
    ("efficientnet_b0", 5_288_548),
    ("squeezenet1_1", 1_235_496),
    ("alexnet", 61_100_840),
    ("inception_v3", 27_161_264),
];

/// gpt2-large (774,030,080) and gpt2-xl (1,557,611,200) are left out: building
/// them takes 3 and 6 GB here.
const GPT_PARAMETERS: [(&str, i64); 5] = [
    ("gpt2-small", 124_439_808),
    ("gpt2-medium", 354_823_168),
    ("gpt-mini", 12_515_520),
    ("gpt-micro", 7_357_312),
    ("gpt-nano", 2_546_400),
];

#[test]
fn parameter_counts_equal_torchvision() {
    assert_eq!(model::all().len(), TORCHVISION_PARAMETERS.len() + GPT_PARAMETERS.len() + 2);
    for (name, expected) in TORCHVISION_PARAMETERS.into_iter().chain(GPT_PARAMETERS) {
        let spec = model::find(name).unwrap();
        assert_eq!(spec.parameter_count(spec.default_classes).unwrap(), expected, "{name}");
    }
}

#[test]
fn unknown_models_list_the_known_ones() {
    let err = model::find("resnet19").err().unwrap().to_string();
    assert!(err.contains("unknown model 'resnet19'"), "{err}");
    assert!(err.contains("resnet18") && err.contains("inception_v3"), "{err}");
}
