"""Reading the record: the tracking store (:mod:`analysis.reading.store`, read without MLflow by
:mod:`analysis.reading.sqlite_reader` where it can), the runs and their tags
(:mod:`analysis.reading.record`), the per-item outcomes (:mod:`analysis.reading.outcomes`) and
the results tables a notebook loads (:mod:`analysis.reading.load`). Nothing here analyses."""
