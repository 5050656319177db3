/* Page behaviour of the course book (loaded on every page from _static/; no network).
 *
 * 1. Solution dropdowns (sphinx-exercise + sphinx-togglebutton): the title of a solution is a
 *    link back to its exercise, so a click on the title text used to jump up to the exercise
 *    instead of opening the solution.  A click on a link inside a collapsible admonition's
 *    title now opens or closes it, as a click anywhere else on the title does.
 * 2. Wide blocks (display maths, code, cell outputs, tables) scroll sideways inside their own
 *    box; `data-overflow` ("left", "right" or "both") marks the sides with hidden content, and
 *    course-layout.css fades those edges so the reader sees there is more to scroll to. */
(function () {
  "use strict";

  document.addEventListener("click", function (ev) {
    var link = ev.target.closest ? ev.target.closest("a") : null;
    if (!link) return;
    var title = link.closest(".toggle > .admonition-title");
    if (!title) return;
    var button = title.querySelector(".toggle-button");
    if (!button) return;
    ev.preventDefault();
    ev.stopPropagation();
    button.click();  /* bubbles to the title, whose handler toggles the admonition */
  }, true);

  var WIDE = [
    "mjx-container[display=true]", "div.math", "div.highlight pre", ".cell_output pre",
    ".cell_output .output.text_html", ".pst-scrollable-table-container", ".cell_output .output > table",
    ".table-wrapper", ".cell_output div[id^=bertviz-]"
  ].join(",");

  function mark(node) {
    var max = node.scrollWidth - node.clientWidth;
    var state = "";
    if (max > 1) {
      var left = node.scrollLeft > 1, right = node.scrollLeft < max - 1;
      state = left && right ? "both" : (left ? "left" : (right ? "right" : ""));
    }
    if (state) node.setAttribute("data-overflow", state);
    else node.removeAttribute("data-overflow");
  }

  var watched = [];
  function scan() {
    var nodes = document.querySelectorAll(".bd-article " + WIDE.split(",").join(", .bd-article "));
    for (var i = 0; i < nodes.length; i++) {
      var node = nodes[i];
      if (!node.hasAttribute("data-scroll-watch")) {
        node.setAttribute("data-scroll-watch", "");
        node.addEventListener("scroll", function () { mark(this); }, {passive: true});
        watched.push(node);
      }
    }
    watched.forEach(mark);
  }

  var pending = null;
  function later() {
    if (pending) return;
    pending = window.setTimeout(function () { pending = null; scan(); }, 150);
  }
  function start() {
    scan();
    window.addEventListener("resize", later);
    window.addEventListener("load", later);
    var mj = window.MathJax;
    if (mj && mj.startup && mj.startup.promise) mj.startup.promise.then(later);
    /* MathJax and cell outputs (bertviz, widgets) render after load */
    var timer = 0, count = 0;
    timer = window.setInterval(function () { scan(); if (++count >= 10) window.clearInterval(timer); }, 500);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
