"""The training config: flags, YAML defaults, validation, round trip."""

import pytest
import yaml

from yolo11.engine.config import TrainConfig, parse_config, save_config
from yolo11.preflight import SAMPLE_DATA


def test_defaults_are_ultralytics_recipe():
    config = parse_config([])
    assert (config.optim.lr0, config.optim.lrf, config.optim.momentum) == (0.01, 0.01, 0.937)
    assert (config.optim.weight_decay, config.optim.nominal_batch, config.optim.warmup_epochs) == (5e-4, 64, 3.0)
    assert (config.data.mosaic, config.data.fliplr, config.data.close_mosaic) == (1.0, 0.5, 10)
    assert (config.optim.ema_decay, config.optim.ema_tau, config.optim.clip_grad) == (0.9999, 2000.0, 10.0)


def test_flags_types_and_booleans():
    config = parse_config(["--lr0", "0.02", "--max-boxes", "50", "--no-ema", "--compile", "--grad-accum", "none"])
    assert config.optim.lr0 == 0.02 and config.data.max_boxes == 50
    assert config.optim.ema is False and config.run.compile is True and config.optim.grad_accum is None
    assert parse_config(["--ema", "false"]).optim.ema is False


@pytest.mark.parametrize("argv, message", [
    (["--mosaic", "1.5"], "probability"),
    (["--optimizer", "Lion"], "invalid choice"),
    (["--epochs", "0"], ">= 1"),
    (["--pretrained"], "timm --backbone"),
    (["--name", ""], "--name '' names no run folder"),  # runs landed in --output-dir itself, then beside it
    (["--name", "."], "--name '.' names no run folder"),
])
def test_invalid_flags_exit_with_message(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        parse_config(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("flag, value", [
    ("--imgsz", "0"), ("--imgsz", "-32"),
    ("--lr0", "nan"), ("--lr0", "inf"), ("--lr0", "0"), ("--lr0", "-0.01"),
    ("--lrf", "0"), ("--lrf", "1.5"), ("--lrf", "nan"),
    ("--momentum", "1"), ("--momentum", "-0.1"), ("--momentum", "nan"),
    ("--weight-decay", "-1e-4"), ("--weight-decay", "inf"), ("--weight-decay", "nan"),
    ("--ema-decay", "1"), ("--ema-decay", "-0.5"), ("--ema-decay", "nan"), ("--ema-tau", "0"), ("--ema-tau", "inf"),
    ("--val-iou", "1.5"), ("--val-iou", "nan"), ("--val-conf", "-0.1"), ("--val-conf", "inf"),
    ("--max-det", "0"), ("--warmup-epochs", "-1"), ("--warmup-epochs", "nan"), ("--warmup-momentum", "1"),
    ("--warmup-bias-lr", "-0.1"), ("--patience", "-1"), ("--close-mosaic", "-1"), ("--save-period", "-1"),
    ("--val-interval", "-2"), ("--log-interval", "0"), ("--epochs", "0"), ("--batch-size", "0"),
    ("--val-batch-size", "0"), ("--workers", "-1"), ("--clip-grad", "-1"), ("--clip-grad", "nan"),
    ("--keep-checkpoints", "-1"), ("--nominal-batch", "0"), ("--grad-accum", "0"), ("--max-steps", "0"),
    ("--seed", "-1"), ("--val-images", "-1"),
    ("--mosaic", "nan"), ("--mixup", "2"), ("--fliplr", "-0.5"), ("--flipud", "inf"),
    ("--translate", "1.5"), ("--scale", "-0.5"), ("--scale", "nan"), ("--perspective", "2"),
    ("--hsv-h", "1.5"), ("--hsv-s", "-1"), ("--hsv-v", "nan"), ("--degrees", "inf"), ("--degrees", "-10"),
    ("--shear", "nan"), ("--max-boxes", "0"),
])
def test_out_of_range_flag_is_a_usage_error_naming_it(flag, value, capsys):
    with pytest.raises(SystemExit) as exc:
        parse_config([f"{flag}={value}"])  # "=": argparse takes "-1e-4" for a flag otherwise
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"error: {flag} " in err and "Traceback" not in err


@pytest.mark.parametrize(("argv", "said"), [(["data="], "data= has no value"), (["--data", ""], "--data is empty"),
                                             (["--data", " "], "--data is empty"), (['data=""'], "--data is empty")])
def test_an_empty_data_value_is_refused_not_read_as_the_built_in_data(argv, said, capsys):
    """`data=$DATA` with DATA unset must not train on the synthetic shapes that leaving data out chooses."""
    with pytest.raises(SystemExit) as exc:
        parse_config(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert said in err and "leave" in err and "Traceback" not in err


@pytest.mark.parametrize("text", ["lr0: .nan\n", "epochs: 2.5\n", "lr0: [1]\n", "mosaic: yes\n"])
def test_yaml_value_of_the_wrong_type_is_a_usage_error(tmp_path, capsys, text):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(SystemExit) as exc:
        parse_config(["--config", str(path)])
    assert exc.value.code == 2
    assert f"error: --{text.split(':')[0]} " in capsys.readouterr().err


def test_abbreviated_flag_is_rejected(capsys):
    with pytest.raises(SystemExit) as exc:
        parse_config(["--epoch", "5"])
    assert exc.value.code == 2 and "unknown argument '--epoch'; did you mean '--epochs'?" in capsys.readouterr().err


def test_yaml_defaults_and_unknown_key(tmp_path, capsys):
    good = tmp_path / "good.yaml"
    good.write_text("lr0: 0.005\nclose-mosaic: 3\n")
    config = parse_config(["--config", str(good), "--lrf", "0.1"])
    assert (config.optim.lr0, config.data.close_mosaic, config.optim.lrf) == (0.005, 3, 0.1)
    # Flags win over the YAML.
    assert parse_config(["--config", str(good), "--lr0", "0.1"]).optim.lr0 == 0.1
    bad = tmp_path / "bad.yaml"
    bad.write_text("lr_zero: 0.1\n")
    with pytest.raises(SystemExit):
        parse_config(["--config", str(bad)])
    assert "unknown argument 'lr_zero'" in capsys.readouterr().err


def test_saved_config_round_trips_and_reloads_as_defaults(tmp_path):
    config = parse_config(["--epochs", "7", "--backbone", "resnet18", "--mixup", "0.2"])
    path = tmp_path / "config.yaml"
    save_config(config, path)
    assert TrainConfig.from_dict(yaml.safe_load(path.read_text())) == config
    assert parse_config(["--config", str(path)]) == config


def test_config_is_frozen():
    config = parse_config([])
    with pytest.raises(AttributeError):
        config.run.epochs = 3


def test_auto_means_the_default_choice_for_optional_booleans_and_integers_only():
    config = parse_config(["--resume", "auto", "--cache-images", "auto", "--hsv-on-device", "auto",
                           "--save-period", "auto"])
    assert config.run.resume == "auto"  # a string flag keeps its value
    assert config.data.cache_images is None and config.data.hsv_on_device is None
    assert config.run.save_period is None and parse_config(["--save-period", "3"]).run.save_period == 3


def test_ultralytics_flag_aliases_set_our_flags():
    ours = parse_config(["--batch-size", "8", "--output-dir", "out", "--nominal-batch", "32"])
    assert parse_config(["--batch", "8", "--project", "out", "--nbs", "32"]) == ours
    assert (ours.run.batch_size, ours.run.output_dir, ours.optim.nominal_batch) == (8, "out", 32)


ULTRALYTICS_ARGS = """\
task: detect
mode: train
model: yolo11s.pt
data: coco8.yaml
epochs: 3
batch: 8
imgsz: 64
project: runs/ultra
name:
pretrained: true
cos_lr: true
val: false
cache: ram
save_period: -1
channels_last:
freeze: 10
fraction: 0.5
device: cpu
box: 7.5
lr0: 0.02
"""


def test_ultralytics_args_yaml_maps_known_keys_and_lists_the_ignored_ones(tmp_path, capsys):
    """A run's args.yaml (flat Ultralytics keys): renamed and translated keys set our flags and are listed; keys
    not implemented here are ignored, each listed when its value is not Ultralytics' default; flags still win."""
    path = tmp_path / "args.yaml"
    path.write_text(ULTRALYTICS_ARGS)
    config = parse_config(["--config", str(path), "--epochs", "5"])
    assert (config.model.model, config.model.weights, config.model.pretrained) == ("yolo11s", "yolo11s.pt", False)
    assert (config.run.batch_size, config.run.output_dir, config.run.name, config.run.epochs) == (8, "runs/ultra",
                                                                                               "exp", 5)
    assert (config.optim.schedule, config.optim.lr0, config.run.val_interval) == ("cosine", 0.02, -1)
    # coco8.yaml is no file here: it names the copy shipped in yolo11/assets
    assert (config.data.imgsz, config.data.data, config.data.cache_images) == (64, str(SAMPLE_DATA["coco8.yaml"]),
                                                                               True)
    assert (config.run.save_period, config.run.channels_last) == (None, True)  # -1 and null: our defaults (auto)
    out = capsys.readouterr().out
    assert "batch -> --batch-size" in out and "model: yolo11s.pt -> --model yolo11s --weights yolo11s.pt" in out
    ignored = next(line for line in out.splitlines() if "ignored" in line)
    assert "fraction=0.5" in ignored and "device" not in ignored and "freeze" not in ignored  # read as ours:
    assert (config.run.device, config.model.freeze) == ("cpu", "10")
    assert "box" not in ignored and "more at Ultralytics' defaults" in ignored


@pytest.mark.parametrize("value, flag", [("0", "0"), ("[0, 1]", "0,1"), ("cuda:1", "cuda:1"), ("cpu", "cpu")])
def test_device_is_read_as_its_text(value, flag):
    assert parse_config([f"device={value}"]).run.device == flag


@pytest.mark.parametrize("device, environ, message", [
    ("0", {}, "--device 0: torch sees 0 CUDA GPU(s); use device=cpu"),
    ("cuda:1", {}, "--device cuda:1: torch sees 0 CUDA GPU(s); use device=cpu"),
    ("0,1", {}, "--device 0,1: one process trains on one device; 2 GPUs train as 2 processes: accelerate launch "
                "--multi_gpu --num_processes 2 --gpu_ids 0,1 train_accelerate.py"),
    ("cpu", {"WORLD_SIZE": "2"}, "--device cpu: a launch of 2 processes places each on its own device"),
    ("mps", {}, "--device mps: torch sees no MPS device"),
    ("foo", {}, "--device foo is not a device: cpu, cuda, cuda:N, N (a GPU index) or mps"),
])
def test_a_device_this_process_cannot_take_is_refused(monkeypatch, device, environ, message):
    """Ultralytics stops on a GPU it does not see; the key was ignored here (device=1 would have trained on GPU 0)."""
    import torch

    from yolo11.engine.plan import LaunchError
    from yolo11.engine.process_group import chosen_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    with pytest.raises(LaunchError) as refused:
        chosen_device(device, environ)
    assert str(refused.value).startswith(message)
    assert chosen_device(None, {}) is None and chosen_device("CPU", {}) == torch.device("cpu")


def test_train_on_a_device_it_cannot_take_is_one_error_line(monkeypatch, capsys, tmp_path):
    import torch

    from yolo11.train import main

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    code = main(["--data", "synthetic:num_images=4,num_val=2,imgsz=64", "--imgsz", "64", "--epochs", "1",
                 "--output-dir", str(tmp_path), "device=0"])
    error = capsys.readouterr().err.strip()
    assert code == 2 and error == "error: --device 0: torch sees 0 CUDA GPU(s); use device=cpu"
    assert not any(tmp_path.iterdir())  # refused before the run folder


def test_an_ultralytics_key_of_ours_that_means_something_else_is_said(capsys):
    """profile=True profiles ONNX/TensorRT exports in Ultralytics; ours traces training steps: taken, said."""
    config = parse_config(["profile=True", "epochs=2"])
    assert config.run.profile is True
    assert "profile=True: here a torch.profiler trace" in capsys.readouterr().out
    parse_config(["profile=False"])
    assert "torch.profiler" not in capsys.readouterr().out


@pytest.mark.parametrize("batch", ["-1", "0.7"])
def test_autobatch_is_read_as_its_fallback_batch_with_a_note(batch, capsys):
    """Ultralytics' batch=-1 (AutoBatch, or a fraction of GPU memory) was refused as '--batch-size must be an
    integer >= 1'; AutoBatch is not implemented: batch 16, where Ultralytics' AutoBatch cannot measure."""
    config = parse_config([f"batch={batch}"])
    assert config.run.batch_size == 16
    assert f"batch={batch}: Ultralytics' AutoBatch is not implemented; batch 16" in capsys.readouterr().out


@pytest.mark.parametrize("text, message", [
    ("batch: 8\nbatch_size: 16\n", "'batch' and 'batch_size' both set --batch-size"),
    ("task: segment\n", "only detection"),
    ("batchsize: 8\n", "unknown argument 'batchsize'; did you mean 'batch_size'?"),
])
def test_ultralytics_yaml_conflicts_and_unknown_keys_are_errors(tmp_path, capsys, text, message):
    path = tmp_path / "cfg.yaml"
    path.write_text(text)
    with pytest.raises(SystemExit) as exc:
        parse_config(["--config", str(path)])
    assert exc.value.code == 2 and message in capsys.readouterr().err


def test_ultralytics_key_value_arguments_read_as_its_keys(tmp_path, capsys):
    """``yolo train``'s style: key=value tokens typed as YAML values, translated like an args.yaml; they win over
    --config, a --flag wins over them, and a value of a flag that holds '=' is left alone."""
    path = tmp_path / "cfg.yaml"
    path.write_text("epochs: 7\nimgsz: 96\n")
    config = parse_config(["--config", str(path), "data=coco8.yaml", "model=yolo11s.pt", "epochs=3", "lr0=1e-3",
                           "batch=8", "plots=false", "cos_lr=true", "--imgsz", "128", "--name", "a=b"])
    assert (config.data.data, config.model.model, config.model.weights) == (str(SAMPLE_DATA["coco8.yaml"]), "yolo11s",
                                                                           "yolo11s.pt")
    assert (config.run.epochs, config.optim.lr0, config.run.batch_size, config.run.plots) == (3, 1e-3, 8, False)
    assert (config.optim.schedule, config.data.imgsz, config.run.name) == ("cosine", 128, "a=b")
    assert "model: yolo11s.pt -> --model yolo11s --weights yolo11s.pt" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        parse_config(["data=coco8.yaml", "epoch=3"])
    assert exc.value.code == 2 and "error: unknown argument 'epoch'; did you mean 'epochs'?" in capsys.readouterr().err


def test_ultralytics_key_table_matches_the_installed_reference():
    """Every key of the Ultralytics default.yaml is known with its default (skips without Ultralytics)."""
    import importlib.util
    from pathlib import Path

    from yolo11.engine.ultralytics_args import ULTRALYTICS_DEFAULTS

    spec = importlib.util.find_spec("ultralytics")
    if spec is None or spec.origin is None:
        pytest.skip("ultralytics is not importable (PYTHONPATH=/work/ultra)")
    reference = yaml.safe_load((Path(spec.origin).parent / "cfg" / "default.yaml").read_text())
    assert {k: v for k, v in ULTRALYTICS_DEFAULTS.items() if k != "save_dir"} == reference


def test_help_does_not_load_torch():
    """``python -m yolo11.train --help`` parses before the trainer's imports: no torch, accelerate, datasets or
    timm (they take seconds to import)."""
    import subprocess
    import sys

    code = ("import sys\nfrom yolo11.train import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'accelerate', 'datasets', 'timm', "
            "'cv2'}))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "--batch-size" in result.stdout and result.stdout.splitlines()[-1] == "[]"


def _flag_help(flag: str) -> str:
    """What ``--help`` prints for one flag, default included (COLUMNS wide enough that its help is one line, beside
    the flag or below it)."""
    from yolo11.engine.config import build_parser

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("COLUMNS", "100000")
        lines = build_parser().format_help().splitlines()
    at = next(k for k, line in enumerate(lines) if line.lstrip().startswith(flag + " "))
    below = lines[at + 1] if at + 1 < len(lines) and not lines[at + 1].lstrip().startswith("-") else ""
    return f"{lines[at]} {below}"


@pytest.mark.parametrize("flag", ["--model", "--workers", "--cache-dir", "--cache-images", "--hsv-on-device",
                                  "--grad-accum", "--save-period", "--compile", "--compile-loss", "--cuda-graphs",
                                  "--val-batch-size"])
def test_help_of_an_automatic_default_says_it_once(flag):
    """A flag whose default is chosen at run time says how in its help; ``--help`` does not then add "(default:
    None)", which read as if the flag had no default (``--workers ... default auto: 8, ... (default: None)``)."""
    text = _flag_help(flag)
    assert "default" in text and "(default: None)" not in text, text


def test_help_gives_the_real_defaults():
    """--cache-dir names where converted datasets go ($YOLO11_CACHE, else ~/.cache/yolo11/datasets; the help said
    ~/.cache/yolo11); --resume names every form it takes; a plain default is still appended."""
    assert "~/.cache/yolo11/datasets" in _flag_help("--cache-dir") and "YOLO11_CACHE" in _flag_help("--cache-dir")
    resume = _flag_help("--resume")
    assert "last.safetensors" in resume and "newest unfinished run" in resume
    assert "(default: 0.01)" in _flag_help("--lr0") and "(default: True)" in _flag_help("--val-nms")


def test_args_yaml_is_flat_with_ultralytics_names_and_reads_back(tmp_path):
    """The run folder's args.yaml: flat keys, Ultralytics' names, task/mode as Ultralytics writes them;
    ``--config args.yaml`` and ``cfg=args.yaml`` give the same settings back."""
    from yolo11.engine.config import save_args_yaml

    config = parse_config(["--data", "synthetic", "--epochs", "3", "--batch", "8", "--name", "x", "--lr0", "0.02"])
    save_args_yaml(config, tmp_path / "args.yaml")
    flat = yaml.safe_load((tmp_path / "args.yaml").read_text())
    assert flat["task"] == "detect" and flat["mode"] == "train"
    assert flat["batch"] == 8 and flat["epochs"] == 3 and flat["lr0"] == 0.02 and "batch_size" not in flat
    assert all(not isinstance(value, dict) for value in flat.values())
    assert parse_config(["--config", str(tmp_path / "args.yaml")]) == config
    assert parse_config([f"cfg={tmp_path / 'args.yaml'}"]) == config


def test_an_args_yaml_at_ultralytics_defaults_prints_no_ignored_line(tmp_path, capsys):
    """Our own args.yaml holds Ultralytics' keys we do not implement at its defaults: reading it back changes
    nothing, so nothing is said to be ignored (it printed 'ignored: none (and 2 more ...)')."""
    from yolo11.engine.config import save_args_yaml

    save_args_yaml(parse_config(["--data", "synthetic", "--epochs", "3"]), tmp_path / "args.yaml")
    capsys.readouterr()
    parse_config([f"cfg={tmp_path / 'args.yaml'}"])
    assert "ignored" not in capsys.readouterr().out


def test_every_flag_declares_its_resume_rule_and_help() -> None:
    """A flag without a rule cannot be declared (``_fixed``/``_free``/``_local`` make the fields); this walks them all
    so that none slips through another way (the augmentation flags come from ``AugmentParams``)."""
    import dataclasses

    from yolo11.engine.config import _SECTIONS, RESUME_RULES, resume_rules

    rules = resume_rules()
    names = [f.name for section in _SECTIONS.values() for f in dataclasses.fields(section)]
    assert sorted(rules) == sorted(names) and len(names) == len(set(names))
    assert all(rule in RESUME_RULES for rule in rules.values()), rules
    assert all(f.metadata["help"] for section in _SECTIONS.values() for f in dataclasses.fields(section))
    assert rules["mosaic"] == rules["imgsz"] == "fixed" and rules["cuda_graphs"] == rules["compile"] == "free"


# Settings Ultralytics has keys for, none at our default: args.yaml must carry each of them back.
EXPRESSIBLE = ["--model", "yolo11s", "--weights", "yolo11s.pt", "--data", "synthetic", "--epochs", "7", "--batch", "8",
               "--imgsz", "96", "--schedule", "cosine", "--val-interval", "-1", "--save-period", "2", "--workers", "3",
               "--cache-images", "true", "--compile", "false", "--channels-last", "false", "--val-nms", "false",
               "--resume", "auto", "--optimizer", "SGD", "--lr0", "0.02", "--mosaic", "0.5", "--val-conf", "0.01",
               "--val-split", "test", "--nominal-batch", "32", "--output-dir", "out", "--name", "n", "--exist-ok"]


def test_args_yaml_has_only_ultralytics_keys_in_its_types(tmp_path):
    """args.yaml holds Ultralytics' keys only, in its default.yaml's order (ours without a key stay in
    config.yaml); the model is the architecture's YAML with the initial weights as ``pretrained``; automatic
    choices (None) are left out; every value written reads back as the setting it came from."""
    from yolo11.engine.config import save_args_yaml
    from yolo11.engine.ultralytics_args import ULTRALYTICS_DEFAULTS

    config = parse_config([*EXPRESSIBLE, "--no-ema", "--lr-scaling", "sqrt", "--max-steps", "5"])
    save_args_yaml(config, tmp_path / "args.yaml")
    flat = yaml.safe_load((tmp_path / "args.yaml").read_text())
    assert list(flat) == [key for key in ULTRALYTICS_DEFAULTS if key in flat]
    assert (flat["model"], flat["pretrained"], flat["cos_lr"], flat["val"]) == ("yolo11s.yaml", "yolo11s.pt", True,
                                                                                False)
    assert (flat["cache"], flat["nms"], flat["resume"], flat["nbs"], flat["split"]) == (True, False, True, 32, "test")
    assert "workers" not in yaml.safe_load(_args_yaml(tmp_path, [])) and "ema" not in flat
    back = parse_config([f"cfg={tmp_path / 'args.yaml'}"])
    assert back == parse_config(EXPRESSIBLE)  # everything but --ema, --lr-scaling and --max-steps
    assert (back.optim.ema, back.optim.lr_scaling, back.run.max_steps) == (True, "linear", None)


def _args_yaml(tmp_path, argv: list[str]) -> str:
    from yolo11.engine.config import save_args_yaml

    save_args_yaml(parse_config(argv), tmp_path / "defaults.yaml")
    return (tmp_path / "defaults.yaml").read_text()


def test_cfg_key_reads_a_file_under_the_other_keys(tmp_path, capsys):
    """Ultralytics' ``cfg=file.yaml`` (``yolo11 train cfg=runs/train/x/args.yaml``): the file's keys, the other
    arguments win over them; our nested config.yaml is read too; a missing file is one error line."""
    (tmp_path / "cfg.yaml").write_text("epochs: 7\nimgsz: 96\nbatch: 8\ncfg: other.yaml\n")
    config = parse_config([f"cfg={tmp_path / 'cfg.yaml'}", "epochs=3", "--imgsz", "128"])
    assert (config.run.epochs, config.data.imgsz, config.run.batch_size) == (3, 128, 8)
    save_config(config, tmp_path / "config.yaml")
    assert parse_config([f"cfg={tmp_path / 'config.yaml'}"]) == config
    (tmp_path / "outer.yaml").write_text(f"cfg: {tmp_path / 'cfg.yaml'}\nepochs: 5\n")  # --config holding a cfg
    assert parse_config(["--config", str(tmp_path / "outer.yaml")]).run.epochs == 5
    with pytest.raises(SystemExit):
        parse_config([f"cfg={tmp_path / 'missing.yaml'}"])
    assert f"cfg={tmp_path / 'missing.yaml'}: no such file" in capsys.readouterr().err


def test_ultralytics_reads_our_args_yaml(tmp_path):
    """``ultralytics.cfg.get_cfg`` accepts args.yaml (types and ranges), and ``yolo train cfg=args.yaml`` reaches
    ``Model.train`` (its key check passes; the training itself is replaced). Ultralytics runs in a subprocess (its
    import sets global logging); skips without it."""
    import importlib.util
    import os
    import subprocess
    import sys
    from pathlib import Path

    from yolo11.engine.config import save_args_yaml

    spec = importlib.util.find_spec("ultralytics")
    if spec is None or spec.origin is None:
        pytest.skip("ultralytics is not importable (PYTHONPATH=/tmp/ultra2)")
    save_args_yaml(parse_config(EXPRESSIBLE), tmp_path / "args.yaml")
    save_args_yaml(parse_config(["--model", "yolo26n"]), tmp_path / "defaults.yaml")
    code = ("import sys\nfrom ultralytics.cfg import DEFAULT_CFG_DICT, entrypoint, get_cfg\n"
            "from ultralytics.engine.model import Model\nfrom ultralytics.utils import YAML\n"
            "Model.train = lambda self, **kw: print('TRAIN', kw['model'], kw['epochs'])\n"
            "for path in sys.argv[1:]:\n"
            "    get_cfg(cfg=path)\n"
            "    get_cfg(DEFAULT_CFG_DICT, overrides=YAML.load(path))\n"
            "    entrypoint(f'yolo train cfg={path}')\n")
    env = {**os.environ, "PYTHONPATH": str(Path(spec.origin).parents[1]), "YOLO_OFFLINE": "1"}
    result = subprocess.run([sys.executable, "-c", code, str(tmp_path / "args.yaml"), str(tmp_path / "defaults.yaml")],
                            capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    trained = [line for line in result.stdout.splitlines() if line.startswith("TRAIN")]
    assert trained == ["TRAIN yolo11s.yaml 7", "TRAIN yolo26n.yaml 100"], result.stdout


@pytest.mark.gpu
@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("device, expected", [("cpu", "cpu"), ("0", "cuda:0"), ("cuda", "cuda:0")])
def test_device_places_the_one_process(device, expected):
    """On a GPU machine: device=cpu trains on the CPU, device=0 on GPU 0 (torch's current device with it)."""
    import subprocess
    import sys

    code = ("import torch\nfrom yolo11.engine.process_group import launch_state\n"
            f"state = launch_state({device!r})\n"
            "print(state.device.type, torch.cuda.current_device() if state.device.type == 'cuda' else '-')\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split()[-2:] == [expected.split(":")[0], "0" if expected.startswith("cuda") else "-"], \
        (result.stdout[-2000:], result.stderr[-2000:])


def test_training_without_data_says_it_takes_the_synthetic_shapes(capsys):
    parse_config(["--epochs", "1"])
    assert "data: the built-in synthetic shapes, the default (--data or data= names your dataset)" in \
        capsys.readouterr().out
    parse_config(["--data", "synthetic"])  # typed: nothing to say
    assert "synthetic shapes" not in capsys.readouterr().out


def test_another_architectures_yaml_is_not_taken_for_weights(capsys):
    with pytest.raises(SystemExit):
        parse_config(["model=yolov8n.yaml"])
    error = capsys.readouterr().err
    assert "got 'yolov8n.yaml'; other architectures' YAMLs" in error and "--weights" not in error
