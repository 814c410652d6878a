"""The release bundle: the published folder, written whole or not at all, and its verification.

* :mod:`.bundle`: writing the folder (manifest, hashes, optional signature), atomically;
* :mod:`.verify`: re-checking a published folder, for consumers who did not build it.

Named ``publish``, not ``release``: ``dpsynth.release`` is the public function.
"""
