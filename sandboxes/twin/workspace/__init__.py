"""The workspace the twin materialises: the pinned SGLang release's tree, the checkpoint's metadata, the image's aiter files."""
