"""URLs of the ``lock_view`` tests (``@pytest.mark.urls("tests.support.urls_decorators")``)."""

from django.urls import path

from tests.support import decorator_views as views

urlpatterns = [
    path("page/<slug:slug>/", views.page),
    path("gate/", views.gate_view),
    path("search/", views.search),
    path("profile/", views.profile),
    path("broken/<slug:slug>/", views.broken_template),
    path("callable/<slug:slug>/", views.callable_name),
    path("custom/<slug:slug>/", views.page_custom_busy),
    path("dotted/<slug:slug>/", views.page_dotted_busy),
    path("inner/<slug:slug>/", views.page_inner_lock),
    path("async/<int:item_id>/", views.async_item),
    path("async-custom/<int:item_id>/", views.async_item_custom_busy),
    path("item/<int:pk>/", views.ItemView.as_view()),
    path("async-item/<int:pk>/", views.AsyncItemView.as_view()),
]
