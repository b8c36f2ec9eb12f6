"""Generation support: split a generative model into exportable stages and drive them with a decode loop."""
