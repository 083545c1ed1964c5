"""infiniband-diags (perfquery, ibqueryerrors, iblinkinfo, ibnetdiscover), ibstat and sminfo."""
