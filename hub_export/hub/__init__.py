"""Hub side of hub_export: publishing, downloading, revisions, the model card and the embedded Hub server."""
