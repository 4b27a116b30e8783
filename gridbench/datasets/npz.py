"""An .npz archive's arrays, each member inflated in one call; or the arrays' shapes and dtypes from their headers.

np.load reads a compressed member in chunks of 256 KiB, each chunk a few Python calls that give up the GIL and
take it back. A worker's first trial reads its data on a thread beside its imports
(gridbench.trial.steps.start_data_read), and there each chunk waited for the GIL: on 2 cores, with a thread running
Python beside it, mnist's read took 5.75-6.17 s against 0.33-0.35 s read here
(docs/results/around-training/npz-read-2core/data-read.txt). Here zipfile inflates each member in one call, and the
array is a view of the inflated bytes, its header parsed by numpy's public readers: np.load's values. numpy's own
read from memory (np.lib.format.read_array) copies in chunks again, 0.76-1.15 s beside such a thread
(data-read-read-array.txt there); it reads only what those readers cannot (format 3.0, below).
"""

from __future__ import annotations

import io
import math
import zipfile
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

# The .npy format versions whose header numpy's public readers parse. 3.0 is 2.0 with UTF-8 field names, which
# read_array_header_2_0 would decode as Latin-1: an array of 3.0 is read by numpy itself, and only its header's shape
# and dtype (or that it holds objects) are read with 2.0's reader (a structured dtype's names may come out mangled).
VIEW_READERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
HEADER_READERS = {**VIEW_READERS, (3, 0): np.lib.format.read_array_header_2_0}


def read_arrays(
    path: Path | str, keys: Iterable[str], objects: Callable[[io.BytesIO], Any] | None = None
) -> dict[str, np.ndarray]:
    """The archive's arrays named `keys`, with np.load's values; read-only where they are views.

    An array of Python objects is a pickle after its header: `objects(stream)` reads it, the stream just past the
    header (a reader that unpickles numpy's own classes only); without it, the array is refused, as
    np.load(allow_pickle=False) does. Raises KeyError for a missing array, ValueError naming the array for one that
    cannot be read (objects, a header or data cut short), and zipfile's errors for a damaged archive or member (a
    bad CRC names the member).
    """
    arrays = {}
    with zipfile.ZipFile(path) as archive:
        for key in keys:
            raw = archive.read(f"{key}.npy")  # inflated in one call, its CRC checked
            try:
                arrays[key] = _array(raw, objects)
            except ValueError as err:
                raise ValueError(f"{key}: {err}") from None
    return arrays


def _array(raw: bytes, objects: Callable[[io.BytesIO], Any] | None) -> Any:
    """The .npy file in `raw`: a view of its bytes; objects as `objects` reads them; format 3.0 as numpy reads it."""
    stream = io.BytesIO(raw)
    version = np.lib.format.read_magic(stream)
    if version not in HEADER_READERS:
        stream.seek(0)
        return np.lib.format.read_array(stream, allow_pickle=False)  # numpy's own error for a version it lacks
    shape, fortran_order, dtype = HEADER_READERS[version](stream)
    if dtype.hasobject:
        if objects is None:
            raise ValueError("Object arrays cannot be loaded when allow_pickle=False")  # np.load's words
        return objects(stream)
    if version not in VIEW_READERS:
        stream.seek(0)
        return np.lib.format.read_array(stream, allow_pickle=False)
    count, offset = math.prod(shape), stream.tell()
    if len(raw) - offset < count * dtype.itemsize:
        raise ValueError(f"data cut short: {len(raw) - offset} bytes for {count} items of {dtype}")
    flat = np.frombuffer(raw, dtype=dtype, count=count, offset=offset)
    return flat.reshape(shape[::-1]).T if fortran_order else flat.reshape(shape)


def array_headers(path: Path | str, keys: Iterable[str]) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """The shape and dtype of each array named `keys` that the archive holds, from its header alone: nothing else
    of it is inflated or checked. Raises ValueError naming the array where the header is not one numpy writes."""
    headers = {}
    with zipfile.ZipFile(path) as archive:
        held = set(archive.namelist())
        for key in keys:
            if f"{key}.npy" not in held:
                continue
            with archive.open(f"{key}.npy") as member:
                try:
                    version = np.lib.format.read_magic(member)
                    if version not in HEADER_READERS:
                        raise ValueError(f".npy format version {version[0]}.{version[1]}, which numpy does not write")
                    shape, _, dtype = HEADER_READERS[version](member)
                except ValueError as err:
                    raise ValueError(f"{key}: {err}") from None
            headers[key] = (shape, dtype)
    return headers
