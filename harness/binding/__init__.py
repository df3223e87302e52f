"""The binding: an engine's pybind11 module, built against one artifact into an installable wheel (:mod:`.wheel`)."""
