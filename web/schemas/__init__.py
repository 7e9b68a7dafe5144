"""Request and response models, one module per feature, mirroring web/views/.

`common` holds the bases (`Input`, `Body`, `CamelModel`), `ScopeId`, `ErrorOut`, `dump`
and the path and query models several features share; each feature's models are in the
module of that name. Import from the module itself: nothing is re-exported here.
"""
