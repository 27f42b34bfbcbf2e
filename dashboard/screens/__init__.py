"""The dashboard's pages, one folder each: ``page.py`` draws it (``main``, called by the navigation; importing it
draws nothing), ``model.py`` holds its pure rows and texts (tested as tables) and ``figures.py`` its charts, where
the page has them. What every page shares is one level up: the sidebar and refresh skeleton (``ui``), the status
line (``status``), the cached reads (``loaders``), the chart rules (``charts``)."""
