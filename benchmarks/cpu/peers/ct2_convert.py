#!/usr/bin/env python3
"""Converts a Hugging Face BLOOM checkpoint for CTranslate2.

    ct2_convert.py MODEL_DIR OUTPUT_DIR QUANTIZATION      (float32, bfloat16 or int8)

CTranslate2 4.8's converter passes `dtype=` to `from_pretrained`, the keyword of transformers
4.56 and later; the peers' venv has transformers 4.45 (the newest that runs on Debian 12's torch
1.13), which calls it `torch_dtype`. Only that keyword is translated; the conversion is
CTranslate2's own.
"""
import sys

from ctranslate2.converters import TransformersConverter


class Converter(TransformersConverter):
    def load_model(self, model_class, model_name_or_path, **kwargs):
        if "dtype" in kwargs:
            kwargs["torch_dtype"] = kwargs.pop("dtype")
        return model_class.from_pretrained(model_name_or_path, **kwargs)


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    model_dir, output_dir, quantization = sys.argv[1:]
    Converter(model_dir).convert(output_dir, quantization=quantization, force=True)


if __name__ == "__main__":
    main()
