"""Training throughput of cifar10.py's tf.data pipeline vs the tutorial's ImageDataGenerator pipeline.

One process, the same model (the tutorial's CNN, RMSprop, batch 32), the same augmentation (random shifts
up to 10 %, horizontal flips), synthetic CIFAR-shaped data. For each pipeline: a fresh model with the same
initial weights, ``--warmup-steps`` untimed steps (graph tracing, thread start-up), then ``--steps`` timed
steps. Prints images/s for both, their ratio and the device. Also times each pipeline alone (no model) and
the model alone on one batch held in memory: no input pipeline can make training faster than that ceiling.

    python benchmarks/bench_input_pipeline.py            # about 1-2 minutes on 2 CPU cores
    python benchmarks/bench_input_pipeline.py --steps 1000 --repeats 3
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _load_cifar10_module() -> ModuleType:
    try:
        from batchai_sdk.train import cifar10

        return cifar10
    except ImportError:  # running from a checkout without the package installed
        path = Path(__file__).resolve().parents[1] / "src" / "batchai_sdk" / "train" / "cifar10.py"
        spec = importlib.util.spec_from_file_location("cifar10", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module


def _device_name(tf: Any) -> str:
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        details = tf.config.experimental.get_device_details(gpus[0])
        return f"GPU: {details.get('device_name', gpus[0].name)}"
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"CPU: {cpu}, {os.cpu_count()} cores"


def _compiled_model(cifar10: ModuleType, tf: Any, initial_weights: list[Any] | None) -> Any:
    model = cifar10.build_model()
    if initial_weights is not None:
        model.set_weights(initial_weights)
    model.compile(
        loss="sparse_categorical_crossentropy",
        optimizer=cifar10.make_optimizer(1e-4, 1e-6),
        metrics=["accuracy"],
    )
    return model


def _time_fit(
    model: Any, data: Any, steps: int, warmup_steps: int, batch_size: int, **fit_kwargs: Any
) -> float:
    model.fit(data, steps_per_epoch=warmup_steps, epochs=1, verbose=0, **fit_kwargs)
    start = time.perf_counter()
    model.fit(data, steps_per_epoch=steps, epochs=1, verbose=0, **fit_kwargs)
    return steps * batch_size / (time.perf_counter() - start)


def _time_iteration(iterator: Any, steps: int, warmup_steps: int, batch_size: int) -> float:
    for _ in range(warmup_steps):
        next(iterator)
    start = time.perf_counter()
    for _ in range(steps):
        next(iterator)
    return steps * batch_size / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--images", type=int, default=5000, help="synthetic training images (default: 5000)")
    parser.add_argument("--batch-size", type=int, default=32, help="batch size (default: 32, the tutorial's)")
    parser.add_argument("--steps", type=int, default=200, help="timed training steps (default: 200)")
    parser.add_argument("--warmup-steps", type=int, default=20, help="untimed steps first (default: 20)")
    parser.add_argument(
        "--repeats", type=int, default=2, help="measure each N times, keep the best (default: 2)"
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=4,
        help="ImageDataGenerator worker threads (default: 4, the tutorial's)",
    )
    args = parser.parse_args(argv)

    import tensorflow as tf

    cifar10 = _load_cifar10_module()
    tf.keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(args.images, 32, 32, 3), dtype=np.uint8)
    labels = rng.integers(0, 10, size=args.images).astype(np.int64)
    initial_weights = cifar10.build_model().get_weights()

    def tf_data() -> Any:
        return cifar10.make_train_dataset(images, labels, args.batch_size, seed=0, augment=True)

    # The tutorial's pipeline: floats scaled beforehand, ImageDataGenerator with its augmentation settings.
    x_float = images.astype("float32") / 255.0
    datagen = tf.keras.preprocessing.image.ImageDataGenerator(
        width_shift_range=0.1, height_shift_range=0.1, horizontal_flip=True, fill_mode="nearest"
    )

    def generator() -> Any:
        return datagen.flow(x_float, labels, batch_size=args.batch_size, seed=0)

    def cached_batch() -> Any:
        x, y = next(iter(tf_data()))
        return tf.data.Dataset.from_tensors((x, y)).repeat()

    def fit(data: Any, **kwargs: Any) -> float:
        model = _compiled_model(cifar10, tf, initial_weights)
        return _time_fit(model, data, args.steps, args.warmup_steps, args.batch_size, **kwargs)

    def iterate(iterator: Any) -> float:
        return _time_iteration(iterator, args.steps, args.warmup_steps, args.batch_size)

    measures: dict[str, Callable[[], float]] = {
        "tf.data": lambda: fit(tf_data()),
        "ImageDataGenerator": lambda: fit(generator(), workers=args.workers),
        "model alone (ceiling)": lambda: fit(cached_batch()),
        "tf.data (input only)": lambda: iterate(iter(tf_data())),
        "ImageDataGenerator (input only, 1 thread)": lambda: iterate(generator()),
    }
    results: dict[str, float] = {}
    for _ in range(args.repeats):
        for name, measure in measures.items():
            results[name] = max(results.get(name, 0.0), measure())

    print(f"device: {_device_name(tf)}")
    print(
        f"TensorFlow {tf.__version__}, {args.images} synthetic images, batch {args.batch_size}, "
        f"{args.steps} timed steps after {args.warmup_steps} warm-up steps, best of {args.repeats}"
    )
    width = max(len(name) for name in results)
    for name, value in results.items():
        print(f"{name:<{width}}  {value:10.1f} images/s")
    ratio = results["tf.data"] / results["ImageDataGenerator"]
    ceiling = results["model alone (ceiling)"] / results["ImageDataGenerator"]
    print(f"training speed-up, tf.data / ImageDataGenerator: {ratio:.2f}x (goal: >= 2x on CPU)")
    print(f"largest speed-up any input pipeline could give here: {ceiling:.2f}x (model alone / generator)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
