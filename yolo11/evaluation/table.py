"""The per-class summary table that ``yolo11-val`` and the end of training print (Ultralytics' layout)."""

from __future__ import annotations

TABLE_COLUMNS = ("class", "images", "instances", "P", "R", "mAP50", "mAP50-95")


def class_rows(metrics: dict, class_names: list[str], ground_truth: dict) -> list[tuple]:
    """``("all", images, instances, P, R, mAP50, mAP50-95)``, then one such row per class with ground truth (P and
    R at the best-F1 confidence). ``ground_truth`` is the evaluator's COCO dict (category id = class + 1)."""
    images: dict[int, set] = {}
    instances: dict[int, int] = {}
    for ann in ground_truth["annotations"]:
        images.setdefault(ann["category_id"] - 1, set()).add(ann["image_id"])
        instances[ann["category_id"] - 1] = instances.get(ann["category_id"] - 1, 0) + 1
    rows = [("all", len(ground_truth["images"]), sum(instances.values()), metrics["precision"], metrics["recall"],
             metrics["map50"], metrics["map50_95"])]
    for k, name in enumerate(class_names):
        if k in instances:  # a class with ground truth but no detection has no COCO AP: it scores 0
            values = (metrics.get(key, [None] * len(class_names))[k] or 0.0 for key in (
                "per_class_precision", "per_class_recall", "per_class_ap50", "per_class_ap50_95"))
            rows.append((name, len(images[k]), instances[k], *values))
    return rows


def format_table(metrics: dict, class_names: list[str], ground_truth: dict) -> str:
    """The ``class_rows`` as Ultralytics prints them: all classes, then each class with ground truth."""
    width = max([20, *(len(name) for name in class_names)])
    lines = [f"{'class':>{width}} {'images':>8} {'instances':>10} {'P':>8} {'R':>8} {'mAP50':>8} {'mAP50-95':>9}"]
    lines += [_row(*row, width) for row in class_rows(metrics, class_names, ground_truth)]
    return "\n".join(lines)


def _row(name: str, images: int, instances: int, precision: float, recall: float, map50: float, map50_95: float,
         width: int) -> str:
    return (f"{name:>{width}} {images:>8} {instances:>10} {precision:>8.4f} {recall:>8.4f} {map50:>8.4f} "
            f"{map50_95:>9.4f}")
