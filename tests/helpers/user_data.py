"""Datasets as users bring them, generated from the shipped coco8 sample: every image format and the layouts that
labelling tools export. Each image is written so that it *displays* as the original (EXIF-rotated files store the
pixels turned the other way), so its YOLO labels are the original's and its expected pixels are known."""

from __future__ import annotations

import io
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[2]
COCO8 = ROOT / "yolo11" / "assets" / "coco8"
# stored = displayed turned by this; the EXIF orientation turns it back (PIL's exif_transpose convention)
ORIENTATION_STORE = {6: Image.Transpose.ROTATE_90, 8: Image.Transpose.ROTATE_270, 3: Image.Transpose.ROTATE_180}


@dataclass(frozen=True)
class Variant:
    """One way of writing an image: the file name suffix, PIL's save call, and how exactly its pixels survive."""

    name: str
    suffix: str
    mode: str = "RGB"  # PIL mode the displayed image is converted to before saving
    save: dict | None = None
    orientation: int = 1
    lossless: bool = True
    sixteen_bit: bool = False


VARIANTS = (
    Variant("jpeg baseline", ".jpg", save={"format": "JPEG", "quality": 95}, lossless=False),
    Variant("jpeg progressive", ".jpeg", save={"format": "JPEG", "quality": 95, "progressive": True}, lossless=False),
    Variant("jpeg cmyk", ".jpg", mode="CMYK", save={"format": "JPEG", "quality": 95}, lossless=False),
    Variant("jpeg exif 6", ".jpg", save={"format": "JPEG", "quality": 95}, orientation=6, lossless=False),
    Variant("jpeg exif 3 upper case", ".JPG", save={"format": "JPEG", "quality": 95}, orientation=3, lossless=False),
    Variant("png rgb", ".png", save={"format": "PNG"}),
    Variant("png 16 bit", ".png", sixteen_bit=True),
    Variant("png palette", ".png", mode="P", save={"format": "PNG"}),
    Variant("png grey", ".Png", mode="L", save={"format": "PNG"}),
    Variant("png rgba", ".png", mode="RGBA", save={"format": "PNG"}),
    Variant("png exif 8", ".png", save={"format": "PNG"}, orientation=8),
    Variant("bmp", ".bmp", save={"format": "BMP"}),
    Variant("tiff lzw", ".tif", save={"format": "TIFF", "compression": "tiff_lzw"}),
    Variant("tiff exif 6", ".TIFF", save={"format": "TIFF"}, orientation=6),
    Variant("webp lossless", ".webp", save={"format": "WEBP", "lossless": True}),
    Variant("webp lossy", ".webp", save={"format": "WEBP", "quality": 90}, lossless=False),
)


def coco8_samples() -> list[tuple[Path, Path]]:
    """``(image, label)`` of the 8 shipped images, train then val."""
    images = sorted((COCO8 / "images" / "train").glob("*.jpg")) + sorted((COCO8 / "images" / "val").glob("*.jpg"))
    return [(p, COCO8 / "labels" / p.parent.name / f"{p.stem}.txt") for p in images]


def expected_rgb(displayed: Image.Image, variant: Variant) -> np.ndarray:
    """The RGB pixels a reader must produce for ``displayed`` written as ``variant`` (alpha dropped, grey and
    palette expanded, 16-bit shifted back to 8)."""
    return np.asarray(_as_mode(displayed, variant.mode).convert("RGB"))


def _as_mode(displayed: Image.Image, mode: str) -> Image.Image:
    return displayed.convert("P", palette=Image.Palette.ADAPTIVE) if mode == "P" else displayed.convert(mode)


def write_image(displayed: Image.Image, path: Path, variant: Variant) -> None:
    """Write ``displayed`` so that a viewer shows it: EXIF-rotated variants store it turned the other way."""
    if variant.sixteen_bit:  # 16-bit RGB PNG: PIL cannot write it, build the file through OpenCV's encoder
        import cv2

        rgb16 = np.asarray(displayed.convert("RGB")).astype(np.uint16) * 257  # value v -> v*257: >>8 gives v back
        ok, encoded = cv2.imencode(".png", np.ascontiguousarray(rgb16[..., ::-1]))
        assert ok
        path.write_bytes(encoded.tobytes())
        return
    image = _as_mode(displayed, variant.mode)
    save = dict(variant.save or {})
    if variant.orientation != 1:
        image = image.transpose(ORIENTATION_STORE[variant.orientation])
        exif = Image.Exif()
        exif[274] = variant.orientation
        save["exif"] = exif
    buffer = io.BytesIO()
    image.save(buffer, **save)
    path.write_bytes(buffer.getvalue())


@dataclass(frozen=True)
class CorpusImage:
    path: Path
    variant: Variant
    expected: np.ndarray  # (H, W, 3) RGB as displayed
    label_text: str


def format_corpus(folder: Path) -> tuple[Path, list[CorpusImage]]:
    """An Ultralytics data YAML over every variant of the coco8 images (train: 12 files, val: 4; names with spaces
    and non-ASCII characters); returns the YAML and what each image must read as."""
    samples = coco8_samples()
    written = []
    for index, variant in enumerate(VARIANTS):
        source, label = samples[index % len(samples)]
        split = "val" if index % 4 == 3 else "train"
        stem = f"{index:02d} {variant.name} é✓".replace(" ", "_" if index % 2 else " ")
        path = folder / "images" / split / f"{stem}{variant.suffix}"
        path.parent.mkdir(parents=True, exist_ok=True)
        (folder / "labels" / split).mkdir(parents=True, exist_ok=True)
        displayed = Image.open(source).convert("RGB")
        write_image(displayed, path, variant)
        (folder / "labels" / split / f"{stem}.txt").write_text(label.read_text())
        written.append(CorpusImage(path, variant, expected_rgb(displayed, variant), label.read_text()))
    names = coco8_names()
    data_yaml = folder / "data.yaml"
    data_yaml.write_text(json.dumps({"path": ".", "train": "images/train", "val": "images/val", "names": names}))
    return data_yaml, written


def coco8_names() -> list[str]:
    import yaml

    names = yaml.safe_load((ROOT / "yolo11" / "assets" / "coco8.yaml").read_text())["names"]
    return [names[k] for k in range(len(names))]


def label_boxes(label_text: str, width: int, height: int) -> tuple[np.ndarray, np.ndarray]:
    """``(classes, xyxy pixel boxes)`` of YOLO label text; exact duplicate lines dropped as the converter does."""
    seen, rows = set(), []
    for line in label_text.splitlines():
        fields = tuple(line.split())
        if fields and fields not in seen:
            seen.add(fields)
            rows.append([float(v) for v in fields])
    table = np.array(rows, dtype=np.float64).reshape(-1, 5)
    cx, cy, w, h = table[:, 1] * width, table[:, 2] * height, table[:, 3] * width, table[:, 4] * height
    boxes = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], 1)
    return table[:, 0].astype(int), np.clip(boxes, 0, [width, height, width, height])


# --- layouts ---------------------------------------------------------------------------------------------------

def _copy_split(folder: Path, images_to: str, labels_to: str | None, samples: list[tuple[Path, Path]]) -> None:
    """Copy samples: images into ``folder/images_to``, labels into ``folder/labels_to`` (``None``: beside)."""
    (folder / images_to).mkdir(parents=True, exist_ok=True)
    for image, label in samples:
        shutil.copy(image, folder / images_to / image.name)
        target = folder / (labels_to or images_to)
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy(label, target / label.name)


def roboflow_yolo(folder: Path) -> Path:
    """Roboflow's YOLOv8/YOLO11 export: ``data.yaml`` with ``../train/images`` paths, ``nc`` and a names list."""
    samples = coco8_samples()
    _copy_split(folder, "train/images", "train/labels", samples[:4])
    _copy_split(folder, "valid/images", "valid/labels", samples[4:])
    _copy_split(folder, "test/images", "test/labels", samples[4:6])
    names = coco8_names()
    (folder / "data.yaml").write_text(
        "train: ../train/images\nval: ../valid/images\ntest: ../test/images\n\n"
        f"nc: {len(names)}\nnames: {json.dumps(names)}\n\n"
        "roboflow:\n  workspace: ws\n  project: coco8\n  version: 1\n  license: CC BY 4.0\n"
        "  url: https://universe.roboflow.com/ws/coco8/dataset/1\n")
    return folder


def label_studio_yolo(folder: Path) -> Path:
    """Label Studio's "YOLO" export: ``classes.txt``, ``notes.json``, ``images/`` and ``labels/``, no splits."""
    _copy_split(folder, "images", "labels", coco8_samples())
    (folder / "classes.txt").write_text("\n".join(coco8_names()) + "\n")
    (folder / "notes.json").write_text(json.dumps({"categories": [{"id": i, "name": n}
                                                                  for i, n in enumerate(coco8_names())]}))
    return folder


def cvat_yolo_1_1(folder: Path) -> Path:
    """CVAT's "YOLO 1.1" (darknet) export: ``obj.names``, ``obj.data``, ``train.txt``, labels beside the images in
    ``obj_train_data/``."""
    samples = coco8_samples()
    _copy_split(folder, "obj_train_data", None, samples[:6])
    _copy_split(folder, "obj_valid_data", None, samples[6:])
    (folder / "obj.names").write_text("\n".join(coco8_names()) + "\n")
    (folder / "obj.data").write_text(f"classes = {len(coco8_names())}\ntrain = data/train.txt\n"
                                     "names = data/obj.names\nbackup = backup/\n")
    (folder / "train.txt").write_text("".join(f"data/obj_train_data/{p.name}\n" for p, _ in samples[:6]))
    return folder


def labelimg_folder(folder: Path) -> Path:
    """LabelImg in YOLO mode: images, their txt labels and ``classes.txt`` in one folder."""
    _copy_split(folder, ".", None, coco8_samples())
    (folder / "classes.txt").write_text("\n".join(coco8_names()) + "\n")
    return folder


def yaml_variants(folder: Path) -> dict[str, Path]:
    """Ultralytics data YAMLs over one images/labels tree: without ``path``, lists of folders, txt image lists,
    names as a list and as a dict, with ``nc``."""
    samples = coco8_samples()
    _copy_split(folder, "images/a", "labels/a", samples[:3])
    _copy_split(folder, "images/b", "labels/b", samples[3:6])
    _copy_split(folder, "images/val", "labels/val", samples[6:])
    names = coco8_names()
    (folder / "train.txt").write_text("".join(f"./images/a/{p.name}\n" for p, _ in samples[:3])
                                      + "".join(f"{folder}/images/b/{p.name}\n" for p, _ in samples[3:6]))
    dict_names = "\n".join(f"  {i}: {n}" for i, n in enumerate(names))
    variants = {
        "no path, folder list": f"train: [images/a, images/b]\nval: images/val\nnames: {json.dumps(names)}\n",
        "path, txt list, dict names": f"path: {folder}\ntrain: train.txt\nval: images/val\nnames:\n{dict_names}\n",
        "nc and names": f"train: images/a\nval: [images/val]\nnc: {len(names)}\nnames: {json.dumps(names)}\n",
    }
    paths = {}
    for index, (name, text) in enumerate(variants.items()):
        paths[name] = folder / f"data{index}.yaml"
        paths[name].write_text(text)
    return paths


def roboflow_coco(folder: Path) -> Path:
    """Roboflow's COCO export: ``train/``, ``valid/``, each with ``_annotations.coco.json`` beside its images, and
    Roboflow's extra category 0 (the dataset's name, the supercategory of the real classes, never annotated)."""
    samples, names = coco8_samples(), coco8_names()
    used = sorted({int(line.split()[0]) for _, label in samples for line in label.read_text().splitlines()})
    categories = [{"id": 0, "name": "coco8-export", "supercategory": "none"}]
    categories += [{"id": k + 1, "name": names[c], "supercategory": "coco8-export"} for k, c in enumerate(used)]
    for split, part in (("train", samples[:5]), ("valid", samples[5:])):
        (folder / split).mkdir(parents=True)
        images, annotations = [], []
        for image_id, (image, label) in enumerate(part):
            shutil.copy(image, folder / split / image.name)
            width, height = Image.open(image).size
            images.append({"id": image_id, "file_name": image.name, "width": width, "height": height})
            classes, boxes = label_boxes(label.read_text(), width, height)
            for c, (x1, y1, x2, y2) in zip(classes, boxes):
                annotations.append({"id": len(annotations), "image_id": image_id, "iscrowd": 0,
                                    "category_id": used.index(int(c)) + 1, "area": float((x2 - x1) * (y2 - y1)),
                                    "bbox": [float(x1), float(y1), float(x2 - x1), float(y2 - y1)],
                                    "segmentation": []})
        (folder / split / "_annotations.coco.json").write_text(json.dumps(
            {"info": {}, "licenses": [], "categories": categories, "images": images, "annotations": annotations}))
    return folder


def voc_xml(image_name: str, width: int, height: int, objects: list[tuple[str, tuple[float, ...]]],
            integer: bool = True, difficult: tuple[int, ...] = ()) -> str:
    """A Pascal VOC annotation as LabelImg, Roboflow and CVAT write it; ``objects`` are ``(name, (x1, y1, x2, y2))``
    in the continuous pixel frame, written as VOC's 1-based inclusive corners (``xmin = x1 + 1``, ``xmax = x2``),
    rounded as Roboflow writes them or with decimals as CVAT does; indices in ``difficult`` are marked so."""
    def number(value: float) -> str:
        return str(round(value)) if integer else f"{value:.2f}"

    parts = [f"<annotation>\n  <folder></folder>\n  <filename>{image_name}</filename>\n  <size>\n"
             f"    <width>{width}</width>\n    <height>{height}</height>\n    <depth>3</depth>\n  </size>\n"]
    for k, (name, (x1, y1, x2, y2)) in enumerate(objects):
        parts.append(f"  <object>\n    <name>{name}</name>\n    <pose>Unspecified</pose>\n"
                     f"    <truncated>0</truncated>\n    <difficult>{int(k in difficult)}</difficult>\n"
                     f"    <bndbox>\n      <xmin>{number(x1 + 1)}</xmin>\n      <ymin>{number(y1 + 1)}</ymin>\n"
                     f"      <xmax>{number(x2)}</xmax>\n      <ymax>{number(y2)}</ymax>\n    </bndbox>\n  </object>\n")
    return "".join(parts) + "</annotation>\n"


def _voc_objects(image: Path, label: Path) -> tuple[int, int, list[tuple[str, tuple[float, ...]]]]:
    width, height = Image.open(image).size
    classes, boxes = label_boxes(label.read_text(), width, height)
    names = coco8_names()
    return width, height, [(names[c], tuple(map(float, box))) for c, box in zip(classes, boxes)]


def _voc_root(root: Path, splits: dict[str, list[tuple[Path, Path]]], integer: bool) -> None:
    for folder in ("Annotations", "JPEGImages", "ImageSets/Main"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    for split, samples in splits.items():
        for image, label in samples:
            shutil.copy(image, root / "JPEGImages" / image.name)
            width, height, objects = _voc_objects(image, label)
            (root / "Annotations" / f"{image.stem}.xml").write_text(voc_xml(image.name, width, height, objects,
                                                                            integer))
        (root / "ImageSets" / "Main" / f"{split}.txt").write_text("".join(f"{p.stem}\n" for p, _ in samples))


def voc_devkit(folder: Path) -> Path:
    """The VOC devkit's layout: ``Annotations/``, ``JPEGImages/``, ``ImageSets/Main/{train,val,trainval}.txt`` and
    a per-class list (``person_train.txt``, ``id  1`` per line), which is not a split."""
    samples = coco8_samples()
    _voc_root(folder, {"train": samples[:5], "val": samples[5:]}, integer=True)
    (folder / "ImageSets" / "Main" / "trainval.txt").write_text("".join(f"{p.stem}\n" for p, _ in samples))
    (folder / "ImageSets" / "Main" / "person_train.txt").write_text(
        "".join(f"{p.stem}  1\n" for p, _ in samples[:5]))
    return folder


def cvat_voc(folder: Path) -> Path:
    """CVAT's "PASCAL VOC 1.1" export: the devkit's folders, one ``ImageSets/Main/default.txt`` and
    ``labelmap.txt`` naming every label (with ``background``) in the task's order."""
    _voc_root(folder, {"default": coco8_samples()}, integer=False)
    (folder / "labelmap.txt").write_text("# label:color_rgb:parts:actions\nbackground:0,0,0::\n" + "".join(
        f"{name}:{k % 255},{k * 7 % 255},{k * 13 % 255}::\n" for k, name in enumerate(coco8_names())))
    return folder


def roboflow_voc(folder: Path) -> Path:
    """Roboflow's "Pascal VOC" export: ``train/`` and ``valid/``, each image's xml beside it."""
    samples = coco8_samples()
    for split, part in (("train", samples[:5]), ("valid", samples[5:])):
        (folder / split).mkdir(parents=True)
        for image, label in part:
            shutil.copy(image, folder / split / image.name)
            width, height, objects = _voc_objects(image, label)
            (folder / split / f"{image.stem}.xml").write_text(voc_xml(image.name, width, height, objects))
    (folder / "README.roboflow.txt").write_text("exported from roboflow.com\n")
    return folder


def kaggle_voc(folder: Path) -> Path:
    """Kaggle's VOC datasets (face masks, car plates, road signs): PNG images in ``images/``, their xml in
    ``annotations/``, no split lists."""
    for place in ("images", "annotations"):
        (folder / place).mkdir(parents=True)
    for image, label in coco8_samples():
        Image.open(image).save(folder / "images" / f"{image.stem}.png")
        width, height, objects = _voc_objects(image, label)
        (folder / "annotations" / f"{image.stem}.xml").write_text(voc_xml(f"{image.stem}.png", width, height,
                                                                          objects))
    return folder


def _split_samples() -> dict[str, list[tuple[Path, Path]]]:
    samples = coco8_samples()
    return {"train": samples[:5], "valid": samples[5:]}


def roboflow_csv(folder: Path, normalised: bool = False) -> Path:
    """Roboflow's "Tensorflow Object Detection CSV" export: ``train/`` and ``valid/``, each with
    ``_annotations.csv`` (a row per box, corners in pixels; ``normalised``: as fractions, as other writers do)."""
    for split, part in _split_samples().items():
        (folder / split).mkdir(parents=True)
        lines = ["filename,width,height,class,xmin,ymin,xmax,ymax"]
        for image, label in part:
            shutil.copy(image, folder / split / image.name)
            width, height, objects = _voc_objects(image, label)
            for name, (x1, y1, x2, y2) in objects:
                if normalised:
                    x1, y1, x2, y2 = x1 / width, y1 / height, x2 / width, y2 / height
                lines.append(f"{image.name},{width},{height},{name},{x1:.6f},{y1:.6f},{x2:.6f},{y2:.6f}")
        (folder / split / "_annotations.csv").write_text("\n".join(lines) + "\n")
    return folder


def roboflow_createml(folder: Path) -> Path:
    """Roboflow's "CreateML JSON" export: ``_annotations.createml.json`` per split, boxes as centre and size."""
    for split, part in _split_samples().items():
        (folder / split).mkdir(parents=True)
        entries = []
        for image, label in part:
            shutil.copy(image, folder / split / image.name)
            _, _, objects = _voc_objects(image, label)
            entries.append({"image": image.name, "annotations": [
                {"label": name, "coordinates": {"x": (x1 + x2) / 2, "y": (y1 + y2) / 2, "width": x2 - x1,
                                                "height": y2 - y1}} for name, (x1, y1, x2, y2) in objects]})
        (folder / split / "_annotations.createml.json").write_text(json.dumps(entries))
    return folder


def roboflow_darknet(folder: Path) -> Path:
    """Roboflow's "YOLO Darknet" export: ``train/`` and ``valid/``, each image's txt beside it and the class names
    in ``_darknet.labels`` in each split folder."""
    for split, part in _split_samples().items():
        _copy_split(folder, split, None, part)
        (folder / split / "_darknet.labels").write_text("\n".join(coco8_names()) + "\n")
    return folder


def labelme_json(image_name: str, width: int, height: int, shapes: list[dict]) -> str:
    """A LabelMe 5 annotation as the tool saves it beside its image (``imageData`` left out, as with its
    "Save With Image Data" option off)."""
    return json.dumps({"version": "5.4.1", "flags": {}, "shapes": shapes, "imagePath": image_name,
                       "imageData": None, "imageHeight": height, "imageWidth": width}, indent=2)


def labelme_folder(folder: Path, apart: bool = False) -> Path:
    """LabelMe's default: each image's json beside it in one folder, rectangles drawn from either corner;
    ``apart``: its ``--output annotations/``, the images in ``images/`` (``imagePath`` ``..\\images\\x.jpg`` as
    written on Windows)."""
    images, jsons = (folder / "images", folder / "annotations") if apart else (folder, folder)
    images.mkdir(parents=True)
    jsons.mkdir(parents=True, exist_ok=True)
    for k, (image, label) in enumerate(coco8_samples()):
        shutil.copy(image, images / image.name)
        width, height, objects = _voc_objects(image, label)
        shapes = [{"label": name, "points": [[x2, y2], [x1, y1]] if k % 2 else [[x1, y1], [x2, y2]],
                   "group_id": None, "description": "", "shape_type": "rectangle", "flags": {}, "mask": None}
                  for name, (x1, y1, x2, y2) in objects]
        image_path = f"..\\images\\{image.name}" if apart else image.name
        (jsons / f"{image.stem}.json").write_text(labelme_json(image_path, width, height, shapes))
    return folder
