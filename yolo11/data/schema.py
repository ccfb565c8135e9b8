"""The Hub detection schema every source is converted to, the source handle and the bad-sample summary."""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field, replace

import datasets

LOGGER = logging.getLogger("yolo11.data")


class DataSourceError(RuntimeError):
    """A source that cannot be used at all (missing folder, no class names, Hub unreachable...).

    Raised while the source is loaded, before training starts; single bad samples are skipped instead.
    """


def detection_features(class_names: list[str]) -> datasets.Features:
    """Hub detection schema (as cppe-5): ``bbox`` is COCO ``[x, y, w, h]`` in pixels of the original image."""
    return datasets.Features({
        "image_id": datasets.Value("int64"),
        "image": datasets.Image(decode=False),
        "width": datasets.Value("int32"),
        "height": datasets.Value("int32"),
        "objects": datasets.Sequence({
            "id": datasets.Value("int64"),
            "area": datasets.Value("float32"),
            "bbox": datasets.Sequence(datasets.Value("float32"), length=4),
            "category": datasets.ClassLabel(names=list(class_names)),
        }),
    })


def class_names_of(dataset: datasets.Dataset) -> list[str]:
    """Class names stored in the ``objects.category`` ClassLabel (datasets 5: a dict of lists)."""
    return list(dataset.features["objects"]["category"].feature.names)


def most_objects(dataset: datasets.Dataset) -> int:
    """The most objects any one image of ``dataset`` has (0 for none), read through Arrow: no image decoded."""
    import pyarrow.compute as pc

    if len(dataset) == 0:
        return 0
    column = dataset.select_columns(["objects"]).with_format("arrow")[:].column("objects").combine_chunks()
    counts = pc.list_value_length(pc.struct_field(column, "category"))  # a struct of lists (datasets' Sequence)
    return int(pc.max(pc.fill_null(counts, 0)).as_py() or 0)


def single_class(source: DetectionSource, name: str = "item") -> DetectionSource:
    """``source`` with every object of class 0, ``name`` (Ultralytics' ``single_cls``). Only the Arrow column of
    the classes is new: the images and boxes stay in the cached files, memory-mapped (``Dataset.map`` would copy
    every image into a new file)."""
    import numpy as np
    import pyarrow as pa

    dataset = source.dataset
    table = dataset.data
    chunks = []
    for chunk in table.column("objects").chunks:
        children = dict(zip((f.name for f in chunk.type), chunk.flatten(), strict=True))  # flatten: the slice's
        classes = children["category"]
        # the offsets of a sliced list index its whole values: zeros for all of them keep them valid
        children["category"] = pa.ListArray.from_arrays(classes.offsets, pa.array(np.zeros(len(classes.values),
                                                                                           np.int64)))
        chunks.append(pa.StructArray.from_arrays(list(children.values()), names=list(children),
                                                 mask=chunk.is_null() if chunk.null_count else None))
    column = pa.chunked_array(chunks, type=chunks[0].type) if chunks else table.column("objects")
    features = dataset.features.copy()
    features["objects"] = detection_features([name])["objects"]
    index = table.column_names.index("objects")
    try:  # a memory-mapped table records the change and stays memory-mapped
        table = table.set_column(index, "objects", column)
    except NotImplementedError:  # datasets' concatenation of tables: the same Arrow buffers, held as one table
        from datasets.table import InMemoryTable

        table = InMemoryTable(table.table.set_column(index, "objects", column))
    one = datasets.Dataset(table, info=datasets.DatasetInfo(features=features), split=dataset.split,
                           indices_table=dataset._indices)
    return replace(source, dataset=one, class_names=[name], origin=f"{source.origin}:single_cls")


@dataclass
class BadSampleSummary:
    """What conversion skipped or repaired, one human-readable message per item (file and line named)."""

    skipped_images: list[str] = field(default_factory=list)
    skipped_lines: list[str] = field(default_factory=list)
    clipped_boxes: int = 0
    backgrounds: int = 0
    rescaled: int = 0  # COCO images resized since they were labelled: their boxes scaled from the json's size
    found_by_name: int = 0  # COCO file_names of the labelling tool's machine, found by their base name

    @property
    def num_problems(self) -> int:
        return len(self.skipped_images) + len(self.skipped_lines)

    def to_dict(self) -> dict:
        return asdict(self)

    def merge(self, other: BadSampleSummary) -> None:
        """Add ``other``'s problems and counts after this one's (per-image summaries, in image order)."""
        self.skipped_images += other.skipped_images
        self.skipped_lines += other.skipped_lines
        self.clipped_boxes += other.clipped_boxes
        self.backgrounds += other.backgrounds
        self.rescaled += other.rescaled
        self.found_by_name += other.found_by_name

    @classmethod
    def from_dict(cls, data: dict) -> BadSampleSummary:
        return cls(**data)

    def log(self, name: str, max_messages: int = 20) -> None:
        """Log the summary once (a few messages, then a count) so a dirty dataset does not flood the console."""
        messages = self.skipped_images + self.skipped_lines
        for message in messages[:max_messages]:
            LOGGER.warning("%s: %s", name, message)
        if len(messages) > max_messages:
            LOGGER.warning("%s: ... and %d more problems", name, len(messages) - max_messages)
        if messages or self.clipped_boxes:
            LOGGER.warning("%s: skipped %d images and %d label lines; clipped %d boxes slightly outside the image; "
                           "%d background images", name, len(self.skipped_images), len(self.skipped_lines),
                           self.clipped_boxes, self.backgrounds)
        if self.rescaled:
            LOGGER.warning("%s: %d images are another size than their annotations give (resized since they were "
                           "labelled, the aspect ratio kept): their boxes were scaled to them", name, self.rescaled)
        if self.found_by_name:
            LOGGER.info("%s: %d images were not where their file_name says (a path of the labelling tool's "
                        "machine, such as Label Studio's ../../label-studio/media/upload/...): found by their file "
                        "name in the image folder", name, self.found_by_name)


@dataclass
class DetectionSource:
    """A converted source: the dataset in the Hub schema and its class names (index = class id).

    ``origin`` names what the rows were read from (kind, file or id, split), equal for two sources that read the
    same rows: training and validation can be told apart.
    """

    dataset: datasets.Dataset
    class_names: list[str]
    name: str
    summary: BadSampleSummary = field(default_factory=BadSampleSummary)
    origin: str = ""
