"""``python -m trainer.config [--write README]``: print the configuration reference, or write it into a file
between its markers."""
import sys

from trainer.config.reference import config_reference_markdown, write_reference_into

if len(sys.argv) == 3 and sys.argv[1] == "--write":
    write_reference_into(sys.argv[2])
else:
    print(config_reference_markdown())
