"""The dashboard's pure parts, without a browser or Redis: records and the status line, the figures, the rules
every chart keeps, the wall and colours."""
