"""The Keras script's tf.data input pipelines: sharded, shuffled, augmented in the graph (TensorFlow is
imported inside the functions, so importing this module does not import it)."""

from __future__ import annotations

from typing import Any

from .datasets import Array


def augment_batch(images: Any, seed: Any, shift: float = 0.1, *, flip: bool = True) -> Any:
    """Random horizontal flip (unless ``flip`` is False) and random shift of up to ``shift`` x size, per
    image, for a float batch.

    Like the tutorial's ImageDataGenerator(width_shift_range=0.1, height_shift_range=0.1,
    horizontal_flip=True, fill_mode='nearest'): sub-pixel shifts with bilinear interpolation, borders filled
    with the nearest pixel. ``seed`` is a stateless seed (shape [2]), so the result does not depend on how
    tf.data schedules parallel calls.
    """
    import tensorflow as tf

    seeds = tf.random.experimental.stateless_split(seed, num=3)
    batch = tf.shape(images)[0]
    height = tf.cast(tf.shape(images)[1], tf.float32)
    width = tf.cast(tf.shape(images)[2], tf.float32)
    if flip:
        flipped = tf.random.stateless_uniform([batch], seed=seeds[0]) < 0.5
        images = tf.where(flipped[:, None, None, None], tf.reverse(images, axis=[2]), images)
    dx = tf.random.stateless_uniform([batch], seed=seeds[1], minval=-shift, maxval=shift) * width
    dy = tf.random.stateless_uniform([batch], seed=seeds[2], minval=-shift, maxval=shift) * height
    ones, zeros = tf.ones_like(dx), tf.zeros_like(dx)
    # Projective transform rows [a0 a1 a2 b0 b1 b2 c0 c1]: output (x, y) samples input (x + dx, y + dy).
    transforms = tf.stack([ones, zeros, dx, zeros, ones, dy, zeros, zeros], axis=1)
    return tf.raw_ops.ImageProjectiveTransformV3(
        images=images,
        transforms=transforms,
        output_shape=tf.shape(images)[1:3],
        interpolation="BILINEAR",
        fill_mode="NEAREST",
        fill_value=0.0,
    )


def make_train_dataset(
    images: Array,
    labels: Array,
    batch_size: int,
    *,
    rank: int = 0,
    size: int = 1,
    seed: int = 0,
    augment: bool = True,
    flip: bool = True,
    start_step: int = 0,
) -> Any:
    """Endless tf.data pipeline of (float images in [0, 1], int labels) batches for one rank.

    Every rank shuffles the indices with the same seed, then keeps every ``size``-th one starting at
    ``rank``: disjoint shards that cover the set, reshuffled each pass. Augmentation runs in the graph on
    whole batches, in parallel, with per-step stateless seeds (``start_step`` keeps them fresh on resume).
    """
    import tensorflow as tf

    n = len(images)
    all_images = tf.constant(images)
    all_labels = tf.constant(labels)
    # Distinct augmentation streams per rank; (seed, rank) -> one int64.
    stream = (seed % (1 << 40)) * 4096 + rank

    indices = tf.data.Dataset.range(n).shuffle(n, seed=seed, reshuffle_each_iteration=True)
    if size > 1:
        indices = indices.shard(size, rank)
    batches = indices.repeat().batch(batch_size, drop_remainder=True).enumerate(start=start_step)

    def prepare(step: Any, idx: Any) -> tuple[Any, Any]:
        x = tf.cast(tf.gather(all_images, idx), tf.float32) / 255.0
        y = tf.gather(all_labels, idx)
        if augment:
            x = augment_batch(x, tf.stack([tf.constant(stream, tf.int64), step]), flip=flip)
        return x, y

    return batches.map(prepare, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True).prefetch(
        tf.data.AUTOTUNE
    )


def make_eval_dataset(images: Array, labels: Array, batch_size: int, *, rank: int = 0, size: int = 1) -> Any:
    """Finite pipeline over this rank's shard of an evaluation set (the whole set when size == 1)."""
    import tensorflow as tf

    all_images = tf.constant(images)
    all_labels = tf.constant(labels)
    indices = tf.data.Dataset.range(len(images))
    if size > 1:
        indices = indices.shard(size, rank)

    def prepare(idx: Any) -> tuple[Any, Any]:
        return tf.cast(tf.gather(all_images, idx), tf.float32) / 255.0, tf.gather(all_labels, idx)

    batches = indices.batch(batch_size).map(prepare, num_parallel_calls=tf.data.AUTOTUNE)
    return batches.prefetch(tf.data.AUTOTUNE)
