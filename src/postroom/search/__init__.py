"""Search: the query language (:mod:`.query`) and its compilation to SQL per engine
(:mod:`.compiler`). The service that runs a search is :mod:`postroom.mailbox.search`;
the statements run in :mod:`postroom.store.search_index`. docs/search.md is the user's
reference."""
