"""Experience: a database of optimization outcomes, searched by meaning (see docs/experience.md).

`ExperienceStore` is the entry point; `record_from_dict` / `read_records` turn outside
data into `ExperienceRecord`s. Nothing heavy is imported here: numpy and the embedding
model load only when a search or a recommendation needs them.
"""

from kernelopt.experience.importers import read_records, record_from_dict
from kernelopt.experience.store import ExperienceStore, default_db_path

__all__ = ["ExperienceStore", "default_db_path", "read_records", "record_from_dict"]
